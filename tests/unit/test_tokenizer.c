/* The tokenizer's contract beyond matching Hugging Face (tests/tokenizers/tok_check.c does
 * that): statuses for missing, malformed and unsupported files, invalid UTF-8 and unknown
 * ids; lookups, named special tokens and the chat template from tokenizer_config.json; large
 * inputs; streaming across a character split between tokens; one tokenizer on four threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "tandem/tokenizer.h"

#define TOKDIR TANDEM_SOURCE_DIR "/tests/tokenizers/"
#define SCRATCH TANDEM_BINARY_DIR "/test_tokenizer_files"

/* Writes SCRATCH/name (SCRATCH/err for the load errors, SCRATCH/cfg for the folder test). */
static void write_file(const char *name, const char *text) {
    mkdir(SCRATCH, 0755);
    mkdir(SCRATCH "/err", 0755);
    mkdir(SCRATCH "/cfg", 0755);
    char path[1024];
    snprintf(path, sizeof path, SCRATCH "/%s", name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Loads SCRATCH/name holding `json`; returns the status code, and the message in msg. */
static tdm_code load_text(const char *json, char *msg, size_t msg_size) {
    write_file("err/t.json", json);
    tdm_tokenizer *tok = NULL;
    tdm_status *st = tdm_tokenizer_load(SCRATCH "/err/t.json", &tok);
    tdm_code code = tdm_status_code(st);
    snprintf(msg, msg_size, "%s", tdm_status_message(st));
    tdm_status_free(st);
    tdm_tokenizer_free(tok);
    return code;
}

#define MODEL_AB "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"

static void expect(const char *json, tdm_code code, const char *in_message) {
    char msg[512];
    tdm_code got = load_text(json, msg, sizeof msg);
    if (got != code || (in_message && !strstr(msg, in_message)))
        fail_msg("loading %s: got %d '%s', want %d with '%s'", json, got, msg, code, in_message ? in_message : "");
}

static void test_load_errors(void **state) {
    (void)state;
    tdm_tokenizer *tok = NULL;
    tdm_status *st = tdm_tokenizer_load(SCRATCH "/no_such_file.json", &tok);
    assert_int_equal(tdm_status_code(st), TDM_ERR_NOT_FOUND);
    tdm_status_free(st);
    assert_null(tok);
    expect("{" MODEL_AB "}", TDM_OK, NULL);
    expect("{\"model\": ", TDM_ERR_INVALID_MODEL, "line");
    expect("[1, 2]", TDM_ERR_INVALID_MODEL, "not a JSON object");
    expect("{}", TDM_ERR_INVALID_MODEL, "'model'");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}", TDM_ERR_INVALID_MODEL, "vocab");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}", TDM_ERR_INVALID_MODEL, "'a'");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", TDM_ERR_INVALID_MODEL, NULL);
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999999}, \"merges\": []}}", TDM_ERR_INVALID_MODEL, NULL);
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", TDM_ERR_INVALID_MODEL, "share an id");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a c\"]}}", TDM_ERR_INVALID_MODEL, "not in the vocabulary");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", TDM_ERR_INVALID_MODEL, "merge");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[1, 2]]}}", TDM_ERR_INVALID_MODEL, "merges");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}}", TDM_ERR_INVALID_MODEL, "unk_token");
    expect("{" MODEL_AB ", \"added_tokens\": {}}", TDM_ERR_INVALID_MODEL, "added_tokens");
    expect("{" MODEL_AB ", \"added_tokens\": [{\"id\": \"x\", \"content\": \"<s>\"}]}", TDM_ERR_INVALID_MODEL, "added_tokens");
    expect("{" MODEL_AB ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
           "[{\"SpecialToken\": {\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {}}}",
           TDM_ERR_INVALID_MODEL, "special token");
    expect("{" MODEL_AB ", \"decoder\": {\"type\": \"Strip\", \"content\": 5}}", TDM_ERR_INVALID_MODEL, "Strip");
    /* unsupported parts are named */
    expect("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", TDM_ERR_UNSUPPORTED, "WordPiece");
    expect("{" MODEL_AB ", \"normalizer\": {\"type\": \"NFKC\"}}", TDM_ERR_UNSUPPORTED, "NFKC");
    expect("{" MODEL_AB ", \"pre_tokenizer\": {\"type\": \"Whitespace\"}}", TDM_ERR_UNSUPPORTED, "Whitespace");
    expect("{" MODEL_AB ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"}, "
           "\"behavior\": \"Isolated\", \"invert\": false}}", TDM_ERR_UNSUPPORTED, "\\w+");
    expect("{" MODEL_AB ", \"decoder\": {\"type\": \"WordPiece\"}}", TDM_ERR_UNSUPPORTED, "WordPiece");
    expect("{" MODEL_AB ", \"post_processor\": {\"type\": \"Bogus\"}}", TDM_ERR_UNSUPPORTED, "Bogus");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], \"dropout\": 0.1}}", TDM_ERR_UNSUPPORTED, "dropout");
}

static tdm_tokenizer *load(const char *path) {
    tdm_tokenizer *tok = NULL;
    tdm_status *st = tdm_tokenizer_load(path, &tok);
    if (st) fail_msg("%s: %s", path, tdm_status_message(st));
    return tok;
}

static void test_invalid_utf8_and_ids(void **state) {
    (void)state;
    tdm_tokenizer *tok = load(TOKDIR "gpt2.json");
    static const char *const bad[] = {"a\x80", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ok \xE4\xB8", "\xFF"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 77;
        tdm_status *st = tdm_tokenizer_encode(tok, bad[i], strlen(bad[i]), false, &ids, &n);
        assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
        assert_true(ids == (int32_t *)1 && n == 77); /* untouched */
        tdm_status_free(st);
    }
    /* NUL is a character like any other */
    int32_t *ids;
    size_t n;
    assert_null(tdm_tokenizer_encode(tok, "a\0b", 3, false, &ids, &n));
    char *text;
    size_t len;
    assert_null(tdm_tokenizer_decode(tok, ids, n, false, &text, &len));
    assert_int_equal(len, 3);
    assert_memory_equal(text, "a\0b", 3);
    tdm_string_free(text);
    tdm_tokens_free(ids);
    /* empty input */
    assert_null(tdm_tokenizer_encode(tok, "", 0, true, &ids, &n));
    assert_int_equal(n, 0);
    tdm_tokens_free(ids);
    int32_t out_of_range[] = {5, (int32_t)tdm_tokenizer_vocab_size(tok)};
    text = NULL;
    tdm_status *st = tdm_tokenizer_decode(tok, out_of_range, 2, false, &text, &len);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_null(text);
    tdm_status_free(st);
    int32_t neg = -3;
    st = tdm_tokenizer_decode(tok, &neg, 1, false, &text, &len);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    tdm_token_stream *ts;
    assert_null(tdm_token_stream_create(tok, false, &ts));
    const char *piece;
    st = tdm_token_stream_push(ts, -1, &piece, NULL);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    tdm_token_stream_free(ts);
    tdm_tokenizer_free(tok);
}

static void test_lookups_and_config(void **state) {
    (void)state;
    tdm_tokenizer *tok = load(TOKDIR "sp_legacy.json");
    /* without tokenizer_config.json: bos from the template, eos and unk from the tokens */
    assert_int_equal(tdm_tokenizer_special_id(tok, "bos"), 1);
    assert_int_equal(tdm_tokenizer_special_id(tok, "eos"), 2);
    assert_int_equal(tdm_tokenizer_special_id(tok, "unk"), 0);
    assert_int_equal(tdm_tokenizer_special_id(tok, "pad"), -1);
    assert_int_equal(tdm_tokenizer_special_id(tok, "other"), -1);
    assert_string_equal(tdm_tokenizer_special_text(tok, "eos"), "</s>");
    assert_null(tdm_tokenizer_special_text(tok, "pad"));
    assert_null(tdm_tokenizer_chat_template(tok));
    assert_int_equal(tdm_tokenizer_token_id(tok, "<0x41>"), 3 + 0x41);
    assert_string_equal(tdm_tokenizer_token(tok, 3 + 0x41), "<0x41>");
    assert_int_equal(tdm_tokenizer_token_id(tok, "no such token"), -1);
    assert_null(tdm_tokenizer_token(tok, -1));
    assert_null(tdm_tokenizer_token(tok, (int32_t)tdm_tokenizer_vocab_size(tok)));
    assert_true(tdm_tokenizer_is_special(tok, 1));
    assert_false(tdm_tokenizer_is_special(tok, 300));
    int32_t *ids;
    size_t n;
    assert_null(tdm_tokenizer_encode(tok, "", 0, true, &ids, &n));
    assert_int_equal(n, 1); /* "<s> $A" */
    assert_int_equal(ids[0], 1);
    tdm_tokens_free(ids);
    tdm_tokenizer_free(tok);

    /* a folder with tokenizer_config.json */
    FILE *in = fopen(TOKDIR "sp_legacy.json", "rb");
    assert_non_null(in);
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *json = malloc((size_t)size + 1);
    assert_int_equal(fread(json, 1, (size_t)size, in), (size_t)size);
    json[size] = 0;
    fclose(in);
    write_file("cfg/tokenizer.json", json);
    free(json);
    write_file("cfg/tokenizer_config.json",
               "{\"bos_token\": {\"content\": \"</s>\", \"lstrip\": false}, \"eos_token\": \"<s>\","
               " \"pad_token\": \"<unk>\", \"unk_token\": null, \"add_bos_token\": true,"
               " \"chat_template\": \"{% for m in messages %}{{ m['content'] }}{% endfor %}\"}");
    tok = load(SCRATCH "/cfg");
    assert_int_equal(tdm_tokenizer_special_id(tok, "bos"), 2);
    assert_int_equal(tdm_tokenizer_special_id(tok, "eos"), 1);
    assert_int_equal(tdm_tokenizer_special_id(tok, "pad"), 0);
    assert_string_equal(tdm_tokenizer_special_text(tok, "bos"), "</s>");
    assert_string_equal(tdm_tokenizer_chat_template(tok), "{% for m in messages %}{{ m['content'] }}{% endfor %}");
    tdm_tokenizer_free(tok);
    write_file("cfg/tokenizer_config.json", "{\"bos_token\": ");
    tdm_status *st = tdm_tokenizer_load(SCRATCH "/cfg", &tok);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_MODEL);
    assert_non_null(strstr(tdm_status_message(st), "tokenizer_config.json"));
    tdm_status_free(st);
}

/* Large inputs: many pieces, and one piece of a million characters (BPE with no recursion). */
static void test_large_input(void **state) {
    (void)state;
    const char *files[] = {TOKDIR "gpt2.json", TOKDIR "sp_legacy.json", TOKDIR "llama3.json"};
    size_t n = 1 << 20;
    char *text = malloc(n);
    for (size_t f = 0; f < 3; f++) {
        tdm_tokenizer *tok = load(files[f]);
        for (int kind = 0; kind < 2; kind++) {
            for (size_t i = 0; i < n; i++) text[i] = kind ? 'a' : "the cat, 12 x\n"[i % 14];
            int32_t *ids;
            size_t n_ids;
            assert_null(tdm_tokenizer_encode(tok, text, n, false, &ids, &n_ids));
            assert_true(n_ids > 0 && n_ids <= n);
            char *back;
            size_t len;
            assert_null(tdm_tokenizer_decode(tok, ids, n_ids, false, &back, &len));
            if (f != 1) { /* byte-level: exact round trip */
                assert_int_equal(len, n);
                assert_memory_equal(back, text, n);
            }
            tdm_string_free(back);
            tdm_tokens_free(ids);
        }
        tdm_tokenizer_free(tok);
    }
    free(text);
}

/* A CJK character split across byte-level tokens: the stream holds the bytes back. */
static void test_stream_partial_character(void **state) {
    (void)state;
    tdm_tokenizer *tok = load(TOKDIR "gpt2.json");
    const char *text = "\xe9\xbe\x98\xe9\xbe\x98 ok"; /* a rare character, twice */
    int32_t *ids;
    size_t n;
    assert_null(tdm_tokenizer_encode(tok, text, strlen(text), false, &ids, &n));
    assert_true(n > 3);
    tdm_token_stream *ts;
    assert_null(tdm_token_stream_create(tok, false, &ts));
    char joined[64] = "";
    const char *piece;
    assert_null(tdm_token_stream_push(ts, ids[0], &piece, NULL));
    assert_string_equal(piece, ""); /* one byte of three */
    strcat(joined, piece);
    for (size_t i = 1; i < n; i++) {
        assert_null(tdm_token_stream_push(ts, ids[i], &piece, NULL));
        assert_true(strlen(joined) + strlen(piece) < sizeof joined);
        strcat(joined, piece);
    }
    assert_string_equal(joined, text);
    tdm_token_stream_free(ts);
    tdm_tokens_free(ids);
    tdm_tokenizer_free(tok);
}

/* Text with NUL bytes (byte-level tokens of byte 0, alone and inside a longer run): the
 * stream's pieces, joined by their lengths, are the text (strlen would stop at the first). */
static void test_stream_nul_bytes(void **state) {
    (void)state;
    static const char *files[] = {TOKDIR "gpt2.json", TOKDIR "llama3.json", TOKDIR "sp_legacy.json"};
    static const char text[] = "a\0b \0\0\0 c\0";
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        tdm_tokenizer *tok = load(files[f]);
        int32_t *ids;
        size_t n, len;
        char *want;
        assert_null(tdm_tokenizer_encode(tok, text, sizeof text - 1, false, &ids, &n));
        assert_null(tdm_tokenizer_decode(tok, ids, n, false, &want, &len));
        tdm_token_stream *ts;
        assert_null(tdm_token_stream_create(tok, false, &ts));
        char joined[64];
        size_t joined_len = 0;
        for (size_t i = 0; i < n; i++) {
            const char *piece;
            size_t piece_len = 99;
            assert_null(tdm_token_stream_push(ts, ids[i], &piece, &piece_len));
            assert_int_equal(piece[piece_len], 0);
            assert_true(joined_len + piece_len <= sizeof joined);
            memcpy(joined + joined_len, piece, piece_len);
            joined_len += piece_len;
        }
        assert_int_equal(joined_len, len);
        assert_memory_equal(joined, want, len);
        if (f < 2) { /* the byte-level ones give the bytes back */
            assert_int_equal(len, sizeof text - 1);
            assert_memory_equal(want, text, len);
        }
        tdm_token_stream_free(ts);
        tdm_string_free(want);
        tdm_tokens_free(ids);
        tdm_tokenizer_free(tok);
    }
}

/* One loaded tokenizer used by four threads at once gives what one thread gives. */
typedef struct thread_job {
    const tdm_tokenizer *tok;
    const char *const *texts;
    size_t n_texts;
    size_t sum; /* of ids, weighted by position */
    int failed;
} thread_job;

static void *encode_all(void *arg) {
    thread_job *j = arg;
    for (int rep = 0; rep < 20; rep++) {
        for (size_t i = 0; i < j->n_texts; i++) {
            int32_t *ids;
            size_t n;
            tdm_status *st = tdm_tokenizer_encode(j->tok, j->texts[i], strlen(j->texts[i]), true, &ids, &n);
            if (st) {
                j->failed = 1;
                tdm_status_free(st);
                continue;
            }
            char *text;
            st = tdm_tokenizer_decode(j->tok, ids, n, true, &text, NULL);
            if (st) j->failed = 1;
            else tdm_string_free(text);
            tdm_status_free(st);
            for (size_t k = 0; rep == 0 && k < n; k++) j->sum += (k + 1) * (size_t)ids[k];
            tdm_tokens_free(ids);
        }
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    static const char *const texts[] = {
        "Hello world, it's 2026!", "\xe4\xb8\xad\xe6\x96\x87 and caf\xc3\xa9 \xf0\x9f\x98\x80",
        "<|im_start|>user\nHi<|im_end|>", "    def f(x):\n        return x  # 12345\n", "<s> a </s> b"};
    const char *files[] = {TOKDIR "llama3.json", TOKDIR "sp_legacy.json"};
    for (int f = 0; f < 2; f++) {
        tdm_tokenizer *tok = load(files[f]);
        thread_job one = {tok, texts, 5, 0, 0};
        encode_all(&one);
        assert_false(one.failed);
        thread_job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (thread_job){tok, texts, 5, 0, 0};
            assert_int_equal(pthread_create(&th[i], NULL, encode_all, &jobs[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            assert_false(jobs[i].failed);
            assert_true(jobs[i].sum == one.sum);
        }
        tdm_tokenizer_free(tok);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_invalid_utf8_and_ids),
        cmocka_unit_test(test_lookups_and_config),
        cmocka_unit_test(test_large_input),
        cmocka_unit_test(test_stream_partial_character),
        cmocka_unit_test(test_stream_nul_bytes),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

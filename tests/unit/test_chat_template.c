/* tdm_chat_render against jinja2: tests/chat_templates/cases.json holds conversations
 * rendered by jinja2 with transformers' settings (tools/make_chat_template_cases.py) through
 * the model templates in tests/chat_templates/NAME.jinja (SmolLM2, ChatML/Qwen, Llama 3, Llama 2,
 * Mistral, Gemma, a Gemma 3-like one, Phi-3, and one that exercises the interpreter) and
 * through short one-feature templates; every render must match exactly, and where jinja2
 * raised (raise_exception on a bad role order) tandem must fail with
 * TDM_ERR_INVALID_ARGUMENT carrying the message. Then the errors jinja2 is not asked about:
 * constructs outside the subset, bad syntax, hostile templates (runaway loops, output bombs,
 * deep nesting), bad arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "tandem/tokenizer.h"

#define DIR TANDEM_SOURCE_DIR "/tests/chat_templates/"

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void show_diff(const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  first difference at byte %zu\n  want: ...%.80s\n  got:  ...%.80s\n", i,
            want + from, got + from);
}

static void test_against_jinja2(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *root = json_load_file(DIR "cases.json", 0, &jerr);
    if (!root) fprintf(stderr, "cases.json: %s (line %d)\n", jerr.text, jerr.line);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_is_array(cases));
    size_t n_cases = json_array_size(cases), failures = 0, n_errors = 0;
    assert_true(n_cases > 200);
    for (size_t ci = 0; ci < n_cases; ci++) {
        json_t *c = json_array_get(cases, ci);
        const char *file = json_string_value(json_object_get(c, "template"));
        char *text = NULL;
        if (file) {
            char path[512];
            snprintf(path, sizeof path, DIR "%s", file);
            text = read_text(path);
        } else {
            text = strdup(json_string_value(json_object_get(c, "template_text")));
        }
        assert_non_null(text);
        json_t *jm = json_object_get(c, "messages");
        size_t nm = json_array_size(jm);
        tdm_chat_message msgs[8];
        assert_true(nm <= 8);
        for (size_t k = 0; k < nm; k++) {
            msgs[k].role = json_string_value(json_object_get(json_array_get(jm, k), "role"));
            msgs[k].content = json_string_value(json_object_get(json_array_get(jm, k), "content"));
        }
        const char *bos = json_string_value(json_object_get(c, "bos_token")); /* null -> NULL */
        const char *eos = json_string_value(json_object_get(c, "eos_token"));
        bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        const char *want_err = json_string_value(json_object_get(c, "error"));
        char *out = NULL;
        tdm_status *st = tdm_chat_render(text, msgs, nm, agp, bos, eos, &out);
        const char *name = file ? file : "inline";
        if (want) {
            if (st) {
                fprintf(stderr, "case %zu (%s): failed: %s\n", ci, name, tdm_status_message(st));
                failures++;
            } else if (strcmp(out, want) != 0) {
                fprintf(stderr, "case %zu (%s): output differs from jinja2's\n", ci, name);
                show_diff(want, out);
                failures++;
            }
        } else {
            n_errors++;
            assert_non_null(want_err);
            if (!st || tdm_status_code(st) != TDM_ERR_INVALID_ARGUMENT ||
                !strstr(tdm_status_message(st), want_err)) {
                fprintf(stderr, "case %zu (%s): want the error '%s', got %s\n", ci, name, want_err,
                        st ? tdm_status_message(st) : "a render");
                failures++;
            }
        }
        tdm_status_free(st);
        tdm_string_free(out);
        free(text);
    }
    fprintf(stderr, "%zu cases against jinja2 (%zu raising), %zu failures\n", n_cases, n_errors,
            failures);
    assert_int_equal(failures, 0);
    assert_true(n_errors > 0);
    json_decref(root);
}

static const tdm_chat_message CONV[] = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
};

/* Renders `tmpl` with CONV; expects failure with `code` and `needle` in the message, and
 * *out untouched. */
static void expect_error(const char *tmpl, tdm_code code, const char *needle) {
    char *out = (char *)"untouched";
    tdm_status *st = tdm_chat_render(tmpl, CONV, 3, true, "<s>", "</s>", &out);
    if (!st || tdm_status_code(st) != code || !strstr(tdm_status_message(st), needle))
        fprintf(stderr, "template %.60s: want code %d with '%s', got %d: %s\n", tmpl, (int)code,
                needle, (int)tdm_status_code(st), tdm_status_message(st));
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), code);
    assert_non_null(strstr(tdm_status_message(st), needle));
    assert_string_equal(out, "untouched");
    tdm_status_free(st);
}

static void expect_text(const char *tmpl, const char *want) {
    char *out = NULL;
    tdm_status *st = tdm_chat_render(tmpl, CONV, 3, true, NULL, NULL, &out);
    if (st) fprintf(stderr, "template %s: %s\n", tmpl, tdm_status_message(st));
    assert_null(st);
    assert_string_equal(out, want);
    tdm_string_free(out);
}

static void test_unsupported(void **state) {
    (void)state;
    expect_error("{% macro m() %}x{% endmacro %}{{ m() }}", TDM_ERR_UNSUPPORTED, "macro");
    expect_error("{% include 'other.jinja' %}", TDM_ERR_UNSUPPORTED, "include");
    expect_error("{% raw %}{{ x }}{% endraw %}", TDM_ERR_UNSUPPORTED, "raw");
    expect_error("{{ messages | wordcount }}", TDM_ERR_UNSUPPORTED, "wordcount");
    expect_error("{{ zip(messages, messages) }}", TDM_ERR_UNSUPPORTED, "zip");
    expect_error("{{ 'x' is sameish 'y' }}", TDM_ERR_UNSUPPORTED, "sameish");
    expect_error("{{ 'abc'.zfill(5) }}", TDM_ERR_UNSUPPORTED, "zfill");
    expect_error("{{ 1.5 }}", TDM_ERR_UNSUPPORTED, "float");
    expect_error("{{ 7 / 2 }}", TDM_ERR_UNSUPPORTED, "'/'");
    expect_error("{{ 2 ** 3 }}", TDM_ERR_UNSUPPORTED, "**");
    expect_error("{{ '%s' % 'x' }}", TDM_ERR_UNSUPPORTED, "formatting");
    expect_error("{{ messages | tojson(indent=2) }}", TDM_ERR_UNSUPPORTED, "indent");
    expect_error("{% for m in messages recursive %}{% endfor %}", TDM_ERR_UNSUPPORTED, "recursive");
}

static void test_template_errors(void **state) {
    (void)state;
    /* raise_exception: INVALID_ARGUMENT with the template's message */
    expect_error("{% if messages[0].role == 'system' %}{{ raise_exception('System role not "
                 "supported') }}{% endif %}",
                 TDM_ERR_INVALID_ARGUMENT, "System role not supported");
    /* syntax */
    expect_error("text {{ messages[0].role ", TDM_ERR_INVALID_ARGUMENT, "unterminated");
    expect_error("{% if true %}never closed", TDM_ERR_INVALID_ARGUMENT, "unterminated {% if %}");
    expect_error("{% for m in messages %}x{% endif %}", TDM_ERR_INVALID_ARGUMENT, "endif");
    expect_error("{# a comment that never ends", TDM_ERR_INVALID_ARGUMENT, "unterminated comment");
    expect_error("{{ 'no end quote }}", TDM_ERR_INVALID_ARGUMENT, "unterminated string");
    expect_error("{{ (1 + 2 }}", TDM_ERR_INVALID_ARGUMENT, "unexpected '}'");
    expect_error("{{ 1 + }}", TDM_ERR_INVALID_ARGUMENT, "line 1");
    expect_error("line 1\nline 2\n{{ ) }}", TDM_ERR_INVALID_ARGUMENT, "line 3");
    expect_error("{% endfor %}", TDM_ERR_INVALID_ARGUMENT, "unexpected");
    expect_error("{% break %}", TDM_ERR_INVALID_ARGUMENT, "outside of a loop");
    /* runtime errors Python would raise */
    expect_error("{{ nothing.here }}", TDM_ERR_INVALID_ARGUMENT, "'nothing' is undefined");
    expect_error("{{ 'a' + 1 }}", TDM_ERR_INVALID_ARGUMENT, "unsupported operand");
    expect_error("{{ 1 < 'a' }}", TDM_ERR_INVALID_ARGUMENT, "not supported");
    expect_error("{{ 1 // 0 }}", TDM_ERR_INVALID_ARGUMENT, "by zero");
    expect_error("{% for a, b in [1, 2] %}{% endfor %}", TDM_ERR_INVALID_ARGUMENT, "unpack");
    expect_error("{% set x = 1 %}{% set x.y = 2 %}", TDM_ERR_INVALID_ARGUMENT, "namespace");
    expect_error("{% for x in 5 %}{% endfor %}", TDM_ERR_INVALID_ARGUMENT, "not iterable");
    expect_error("{{ 9223372036854775807 + 1 }}", TDM_ERR_UNSUPPORTED, "64 bits");
    /* long messages are cut at a code point */
    char tmpl[2048];
    size_t o = (size_t)snprintf(tmpl, sizeof tmpl, "{{ raise_exception('");
    for (int i = 0; i < 300; i++) o += (size_t)snprintf(tmpl + o, sizeof tmpl - o, "é");
    snprintf(tmpl + o, sizeof tmpl - o, "') }}");
    char *out = NULL;
    tdm_status *st = tdm_chat_render(tmpl, CONV, 3, false, NULL, NULL, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    const char *m = tdm_status_message(st);
    assert_non_null(strstr(m, "éé..."));
    for (const unsigned char *p = (const unsigned char *)m; *p; p++) /* no lone lead byte */
        if (*p == 0xC3) assert_int_equal(p[1], 0xA9);
    tdm_status_free(st);
}

static void test_hostile(void **state) {
    (void)state;
    /* a billion iterations: refused before the loop runs */
    expect_error("{% for i in range(1000000000) %}x{% endfor %}", TDM_ERR_LIMIT, "range");
    /* nested loops: stopped by the iteration cap */
    expect_error("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}"
                 "{% endfor %}{% endfor %}{% endfor %}",
                 TDM_ERR_LIMIT, "iterations");
    /* doubling a string: stopped by the size cap */
    expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + "
                 "ns.s %}{% endfor %}{{ ns.s }}",
                 TDM_ERR_LIMIT, "MiB");
    expect_error("{{ 'x' * 1000000000000 }}", TDM_ERR_LIMIT, "MiB");
    /* output bomb through text */
    expect_error("{% for i in range(1000) %}{% for j in range(1000) %}0123456789012345678901234567"
                 "89012345678901234567890123456789012345678901234567890123456789012345678901234567"
                 "8901234567890123456789{% endfor %}{% endfor %}",
                 TDM_ERR_LIMIT, "MiB");
    /* nesting deeper than the parser allows */
    char deep[4096];
    size_t o = 0;
    o += (size_t)snprintf(deep + o, sizeof deep - o, "{{ ");
    for (int i = 0; i < 1000; i++) deep[o++] = '(';
    deep[o++] = '1';
    for (int i = 0; i < 1000; i++) deep[o++] = ')';
    snprintf(deep + o, sizeof deep - o, " }}");
    expect_error(deep, TDM_ERR_LIMIT, "deeper");
    o = 0;
    for (int i = 0; i < 200; i++) o += (size_t)snprintf(deep + o, sizeof deep - o, "{%% if 1 %%}");
    expect_error(deep, TDM_ERR_LIMIT, "deeper");
    /* scanning a big string a million times: stopped by the work budget */
    expect_error("{% set s = 'b' * 1000000 %}{% for i in range(1000000) %}{% if 'a' in s %}x"
                 "{% endif %}{% endfor %}",
                 TDM_ERR_LIMIT, "work budget");
    expect_error("{% set s = 'b' * 1000000 %}{% for i in range(1000000) %}{{ s.find('a') }}"
                 "{% endfor %}",
                 TDM_ERR_LIMIT, "work budget");
    /* a chain the parser builds without nesting: 1 + 1 + ... */
    char *chain = malloc(8192);
    assert_non_null(chain);
    o = (size_t)snprintf(chain, 8192, "{{ 1");
    for (int i = 0; i < 2000; i++) o += (size_t)snprintf(chain + o, 8192 - o, "+1");
    snprintf(chain + o, 8192 - o, " }}");
    expect_error(chain, TDM_ERR_LIMIT, "deeper");
    free(chain);
    /* a value nested by a loop, then printed */
    expect_error("{% set ns = namespace(x=1) %}{% for i in range(100) %}{% set ns.x = [ns.x] %}"
                 "{% endfor %}{{ ns.x }}",
                 TDM_ERR_LIMIT, "deeper");
}

static void test_arguments(void **state) {
    (void)state;
    char *out = (char *)"untouched";
    tdm_status *st = tdm_chat_render(NULL, CONV, 3, false, NULL, NULL, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    st = tdm_chat_render("x", NULL, 3, false, NULL, NULL, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    st = tdm_chat_render("x", CONV, 3, false, NULL, NULL, NULL);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    tdm_chat_message bad[] = {{"user", "\xff\xfe broken"}};
    st = tdm_chat_render("{{ messages[0].content }}", bad, 1, false, NULL, NULL, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tdm_status_message(st), "UTF-8"));
    tdm_status_free(st);
    st = tdm_chat_render("\xc0\x80", CONV, 3, false, NULL, NULL, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    assert_string_equal(out, "untouched");
    /* no messages, NULL bos/eos (""), an empty template and an empty output */
    st = tdm_chat_render("[{{ bos_token }}|{{ eos_token }}|{{ messages | length }}]", NULL, 0, true,
                         NULL, NULL, &out);
    assert_null(st);
    assert_string_equal(out, "[||0]");
    tdm_string_free(out);
    expect_text("", "");
    expect_text("{% if false %}x{% endif %}", "");
    /* a NULL role or content reads as "" */
    tdm_chat_message nulls[] = {{NULL, NULL}};
    st = tdm_chat_render("<{{ messages[0].role }}|{{ messages[0].content }}>", nulls, 1, false,
                         NULL, NULL, &out);
    assert_null(st);
    assert_string_equal(out, "<|>");
    tdm_string_free(out);
}

/* strftime_now (transformers' global): today's date, as the Llama 3.2 template asks for it */
static void test_strftime_now(void **state) {
    (void)state;
    char want[64], *out = NULL;
    time_t now = time(NULL);
    struct tm tm;
    assert_non_null(localtime_r(&now, &tm));
    strftime(want, sizeof want, "%Y-%m-%d|", &tm);
    tdm_status *st = tdm_chat_render("{% if strftime_now is defined %}{{ strftime_now('%Y-%m-%d') }}"
                                     "{% endif %}|{{ strftime_now('') }}",
                                     NULL, 0, false, NULL, NULL, &out);
    assert_null(st);
    assert_string_equal(out, want); /* (fails only if the date changes in between) */
    tdm_string_free(out);
}

static void test_line_endings(void **state) {
    (void)state;
    /* "\r\n" and "\r" are newlines and one final newline is dropped, as in Jinja */
    expect_text("a\r\n{% if true %}\r\nb\rc{% endif %}\n", "a\nb\nc");
    expect_text("x\n\n", "x\n");
    /* lstrip_blocks: only spaces between a line start and a block tag go */
    expect_text("  {% if true %}x{% endif %}", "x");
    expect_text("y  {% if true %}x{% endif %}", "y  x");
    expect_text("  {{ 'v' }}", "  v");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_jinja2), cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_template_errors), cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_arguments),      cmocka_unit_test(test_line_endings),
        cmocka_unit_test(test_strftime_now),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

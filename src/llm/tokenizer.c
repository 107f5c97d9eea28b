/* Loading a Hugging Face tokenizer.json (and tokenizer_config.json) into the tables of
 * tokenizer_impl.h, and the lookups of include/tandem/tokenizer.h. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/hash.h"
#include "core/status.h"
#include "llm/tokenizer_impl.h"

#define TOK_MAX_IDS (1u << 24) /* ids beyond this are refused as malformed */

static tdm_status *bad(const char *fmt, const char *a) {
    return TDM_ERR(TDM_ERR_INVALID_MODEL, fmt, a ? a : "");
}
static tdm_status *oom(void) { return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory"); }

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* ---- vocabulary hash ---- */
static uint64_t str_hash(const char *s, size_t n) { return tdm_hash_bytes(TDM_HASH_INIT, s, n); }

int32_t tdm_tok_vocab_find(const tdm_tokenizer *t, const char *s, size_t n) {
    if (!t->vh) return -1;
    for (size_t i = str_hash(s, n) & t->vh_mask;; i = (i + 1) & t->vh_mask) {
        int32_t id = t->vh[i];
        if (id < 0) return -1;
        if (t->tok_len[id] == n && memcmp(t->tok[id], s, n) == 0) return id;
    }
}

static void vocab_insert(tdm_tokenizer *t, int32_t id) {
    size_t i = str_hash(t->tok[id], t->tok_len[id]) & t->vh_mask;
    while (t->vh[i] >= 0) i = (i + 1) & t->vh_mask;
    t->vh[i] = id;
}

static uint64_t merge_hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 32;
    return key;
}

const tdm_tok_merge *tdm_tok_merge_find(const tdm_tokenizer *t, int32_t a, int32_t b) {
    if (!t->mh) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = merge_hash(key) & t->mh_mask;; i = (i + 1) & t->mh_mask) {
        if (t->mh[i].key == key) return &t->mh[i];
        if (t->mh[i].key == UINT64_MAX) return NULL;
    }
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- JSON helpers ---- */
static bool get_bool(const json_t *o, const char *key, bool dflt) {
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *get_type(const json_t *o) {
    const json_t *v = json_object_get(o, "type");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A Replace/Split "pattern": {"String": s} only; {"Regex": r} returns r in *regex. */
static tdm_status *get_pattern(const json_t *o, const char *what, const char **str,
                               const char **regex) {
    const json_t *p = json_object_get(o, "pattern");
    const json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    *str = NULL;
    *regex = NULL;
    if (json_is_string(s)) *str = json_string_value(s);
    else if (json_is_string(r)) *regex = json_string_value(r);
    else return bad("tokenizer.json: %s: 'pattern' is not {\"String\": ...} or {\"Regex\": ...}", what);
    return NULL;
}

/* ---- model ---- */
static tdm_status *set_id(tdm_tokenizer *t, size_t id, const char *s, size_t n, uint8_t flags) {
    if (t->tok[id]) {
        t->tok_flags[id] |= flags;
        return NULL;
    }
    if (!(t->tok[id] = dup_n(s, n))) return oom();
    t->tok_len[id] = (uint32_t)n;
    t->tok_flags[id] = flags;
    return NULL;
}

static tdm_status *load_merges(tdm_tokenizer *t, const json_t *merges) {
    size_t n = json_array_size(merges);
    t->mh_mask = pow2_at_least(n * 2 + 1) - 1;
    if (!(t->mh = malloc((t->mh_mask + 1) * sizeof *t->mh))) return oom();
    for (size_t i = 0; i <= t->mh_mask; i++) t->mh[i].key = UINT64_MAX;
    tdm_tok_buf tmp = {0};
    tdm_status *st = NULL;
    for (size_t r = 0; r < n && !st; r++) {
        const json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = bad("tokenizer.json: a merge is not two tokens separated by one space: '%s'", a);
                break;
            }
            na = (size_t)(sp - a);
            b = sp + 1;
            nb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            na = strlen(a);
            nb = strlen(b);
        } else {
            st = bad("tokenizer.json: model.merges holds an entry that is not \"a b\" or [a, b]%s", NULL);
            break;
        }
        int32_t ia = tdm_tok_vocab_find(t, a, na), ib = tdm_tok_vocab_find(t, b, nb);
        tmp.len = 0;
        if (!tdm_tok_buf_put(&tmp, a, na) || !tdm_tok_buf_put(&tmp, b, nb)) {
            st = oom();
            break;
        }
        int32_t inew = tdm_tok_vocab_find(t, tmp.p, na + nb);
        if (ia < 0 || ib < 0 || inew < 0) {
            st = bad("tokenizer.json: a merge names a token not in the vocabulary: '%s'", a);
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
        size_t i = merge_hash(key) & t->mh_mask;
        while (t->mh[i].key != UINT64_MAX && t->mh[i].key != key) i = (i + 1) & t->mh_mask;
        t->mh[i].key = key; /* a repeated merge takes the later rank, as HF's map does */
        t->mh[i].rank = (uint32_t)r;
        t->mh[i].id = inew;
    }
    free(tmp.p);
    return st;
}

static tdm_status *load_model(tdm_tokenizer *t, const json_t *model, const json_t *added) {
    if (!json_is_object(model)) return bad("tokenizer.json: 'model' is missing or not an object%s", NULL);
    const char *type = get_type(model);
    if (type && strcmp(type, "BPE") != 0)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: model type '%s' is not supported (BPE only)", type);
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab)) return bad("tokenizer.json: model.vocab is not an object%s", NULL);
    if (!json_is_array(merges)) return bad("tokenizer.json: model.merges is not an array%s", NULL);
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: BPE dropout is not supported");
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, affix[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: BPE %s is not supported", affix[i]);
    }
    t->byte_fallback = get_bool(model, "byte_fallback", false);
    t->fuse_unk = get_bool(model, "fuse_unk", false);
    t->ignore_merges = get_bool(model, "ignore_merges", false);

    /* the id space: model vocabulary and added tokens */
    size_t n_ids = 0, n_vocab = json_object_size(vocab);
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (json_int_t)TOK_MAX_IDS)
            return bad("tokenizer.json: vocabulary id of '%s' is not an integer in range", key);
        if ((size_t)json_integer_value(val) + 1 > n_ids) n_ids = (size_t)json_integer_value(val) + 1;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        if (!json_is_string(json_object_get(a, "content")) || !json_is_integer(id) ||
            json_integer_value(id) < 0 || json_integer_value(id) >= (json_int_t)TOK_MAX_IDS)
            return bad("tokenizer.json: added_tokens[] needs a string 'content' and an id in range%s", NULL);
        if ((size_t)json_integer_value(id) + 1 > n_ids) n_ids = (size_t)json_integer_value(id) + 1;
    }
    t->n_ids = n_ids;
    t->tok = calloc(n_ids ? n_ids : 1, sizeof *t->tok);
    t->tok_len = calloc(n_ids ? n_ids : 1, sizeof *t->tok_len);
    t->tok_flags = calloc(n_ids ? n_ids : 1, 1);
    t->vh_mask = pow2_at_least(n_vocab * 2 + 1) - 1;
    t->vh = malloc((t->vh_mask + 1) * sizeof *t->vh);
    if (!t->tok || !t->tok_len || !t->tok_flags || !t->vh) return oom();
    for (size_t i = 0; i <= t->vh_mask; i++) t->vh[i] = -1;
    json_object_foreach((json_t *)vocab, key, val) {
        size_t id = (size_t)json_integer_value(val);
        if (t->tok[id]) return bad("tokenizer.json: two vocabulary entries share an id (one is '%s')", key);
        TDM_TRY(set_id(t, id, key, strlen(key), 0));
        vocab_insert(t, (int32_t)id);
    }
    TDM_TRY(load_merges(t, merges));

    t->unk_id = -1;
    const json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        t->unk_id = tdm_tok_vocab_find(t, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0) return bad("tokenizer.json: unk_token '%s' is not in the vocabulary", json_string_value(unk));
    } else if (unk && !json_is_null(unk)) {
        return bad("tokenizer.json: model.unk_token is not a string%s", NULL);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = tdm_tok_vocab_find(t, name, 6);
    }
    return NULL;
}

static int cmp_added(const void *pa, const void *pb) {
    const tdm_tok_added *a = pa, *b = pb;
    unsigned char fa = (unsigned char)a->content[0], fb = (unsigned char)b->content[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static tdm_status *load_added(tdm_tokenizer *t, const json_t *added) {
    if (added && !json_is_array(added) && !json_is_null(added))
        return bad("tokenizer.json: 'added_tokens' is not an array%s", NULL);
    size_t n = json_array_size(added);
    if (n && !(t->added = calloc(n, sizeof *t->added))) return oom();
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(added, i);
        const char *content = json_string_value(json_object_get(a, "content"));
        size_t len = json_string_length(json_object_get(a, "content"));
        if (!len) continue; /* an empty added token never matches */
        if (get_bool(a, "single_word", false))
            return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: added token '%s' has single_word (not supported)", content);
        tdm_tok_added *d = &t->added[t->n_added];
        d->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        d->special = get_bool(a, "special", false);
        d->lstrip = get_bool(a, "lstrip", false);
        d->rstrip = get_bool(a, "rstrip", false);
        if (!(d->content = dup_n(content, len))) return oom();
        d->len = len;
        t->n_added++;
        if (t->tok[d->id] && (t->tok_len[d->id] != len || memcmp(t->tok[d->id], content, len) != 0) &&
            !(t->tok_flags[d->id] & TDM_TOK_F_ADDED)) {
            /* an added token over a different model token: the added content wins */
            free(t->tok[d->id]);
            t->tok[d->id] = NULL;
        }
        TDM_TRY(set_id(t, (size_t)d->id, content, len,
                       (uint8_t)(TDM_TOK_F_ADDED | (d->special ? TDM_TOK_F_SPECIAL : 0))));
    }
    if (t->n_added) qsort(t->added, t->n_added, sizeof *t->added, cmp_added);
    size_t j = 0;
    for (int b = 0; b < 256; b++) {
        t->added_first[b] = (uint32_t)j;
        while (j < t->n_added && (unsigned char)t->added[j].content[0] == b) j++;
    }
    t->added_first[256] = (uint32_t)j;
    return NULL;
}

/* ---- normalizer, pre-tokenizer, post-processor, decoder ---- */
static tdm_status *load_normalizer(tdm_tokenizer *t, const json_t *n, int depth) {
    if (!n || json_is_null(n)) return NULL;
    const char *type = get_type(n);
    if (!type) return bad("tokenizer.json: a normalizer has no 'type'%s", NULL);
    if (!strcmp(type, "Sequence") && depth == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return bad("tokenizer.json: normalizer Sequence has no 'normalizers' array%s", NULL);
        for (size_t i = 0; i < json_array_size(list); i++)
            TDM_TRY(load_normalizer(t, json_array_get(list, i), 1));
        return NULL;
    }
    tdm_tok_norm *d = &t->norm[t->n_norm];
    if (!strcmp(type, "Prepend")) {
        const json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p)) return bad("tokenizer.json: normalizer Prepend has no string 'prepend'%s", NULL);
        d->kind = TDM_TOK_NORM_PREPEND;
        if (!(d->a = dup_n(json_string_value(p), json_string_length(p)))) return oom();
        d->na = json_string_length(p);
    } else if (!strcmp(type, "Replace")) {
        const char *s, *re;
        TDM_TRY(get_pattern(n, "normalizer Replace", &s, &re));
        const json_t *c = json_object_get(n, "content");
        if (re) return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: normalizer Replace with a regex is not supported");
        if (!json_is_string(c) || !*s) return bad("tokenizer.json: normalizer Replace needs a non-empty pattern and a string content%s", NULL);
        d->kind = TDM_TOK_NORM_REPLACE;
        d->a = dup_n(s, strlen(s));
        d->b = dup_n(json_string_value(c), json_string_length(c));
        if (!d->a || !d->b) return oom();
        d->na = strlen(s);
        d->nb = json_string_length(c);
    } else if (!strcmp(type, "NFC")) {
        d->kind = TDM_TOK_NORM_NFC;
    } else {
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: normalizer '%s' is not supported "
                       "(Prepend, Replace, NFC and Sequences of them are)", type);
    }
    t->n_norm++;
    return NULL;
}

static const char *const REGEX_TEXT[] = {
    [TDM_TOK_RE_GPT2] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    [TDM_TOK_RE_LLAMA3] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    [TDM_TOK_RE_QWEN2] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

static tdm_status *get_prepend_scheme(const json_t *o, int *out) {
    const json_t *ps = json_object_get(o, "prepend_scheme");
    if (json_is_string(ps)) {
        const char *s = json_string_value(ps);
        if (!strcmp(s, "always")) *out = TDM_TOK_PREPEND_ALWAYS;
        else if (!strcmp(s, "first")) *out = TDM_TOK_PREPEND_FIRST;
        else if (!strcmp(s, "never")) *out = TDM_TOK_PREPEND_NEVER;
        else return bad("tokenizer.json: Metaspace prepend_scheme '%s' is unknown", s);
    } else {
        *out = get_bool(o, "add_prefix_space", true) ? TDM_TOK_PREPEND_ALWAYS : TDM_TOK_PREPEND_NEVER;
    }
    return NULL;
}

static tdm_status *get_replacement(const json_t *o, char *out, size_t *n) {
    const json_t *r = json_object_get(o, "replacement");
    const char *s = json_is_string(r) ? json_string_value(r) : "\xe2\x96\x81";
    size_t len = strlen(s);
    if (!len || len > 4 || tdm_tok_utf8_valid((const unsigned char *)s, len) != len)
        return bad("tokenizer.json: Metaspace replacement is not one character%s", NULL);
    uint32_t cp;
    if (tdm_tok_utf8_dec((const unsigned char *)s, len, &cp) != len)
        return bad("tokenizer.json: Metaspace replacement is not one character%s", NULL);
    memcpy(out, s, len);
    *n = len;
    return NULL;
}

static tdm_status *load_pre(tdm_tokenizer *t, const json_t *p, int depth) {
    if (!p || json_is_null(p)) return NULL;
    const char *type = get_type(p);
    if (!type) return bad("tokenizer.json: a pre-tokenizer has no 'type'%s", NULL);
    if (!strcmp(type, "Sequence") && depth == 0) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return bad("tokenizer.json: pre-tokenizer Sequence has no 'pretokenizers' array%s", NULL);
        for (size_t i = 0; i < json_array_size(list); i++) TDM_TRY(load_pre(t, json_array_get(list, i), 1));
        return NULL;
    }
    tdm_tok_pre *d = &t->pre[t->n_pre];
    memset(d, 0, sizeof *d);
    if (!strcmp(type, "ByteLevel")) {
        d->kind = TDM_TOK_PRE_BYTELEVEL;
        d->add_prefix_space = get_bool(p, "add_prefix_space", true);
        d->use_regex = get_bool(p, "use_regex", true);
    } else if (!strcmp(type, "Split")) {
        const char *s, *re;
        TDM_TRY(get_pattern(p, "pre-tokenizer Split", &s, &re));
        const json_t *beh = json_object_get(p, "behavior");
        if (!re) return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: pre-tokenizer Split on a string is not supported");
        if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated") != 0 || get_bool(p, "invert", false))
            return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: pre-tokenizer Split is supported with behavior Isolated, not inverted");
        size_t k;
        for (k = 0; k < sizeof REGEX_TEXT / sizeof REGEX_TEXT[0]; k++)
            if (!strcmp(re, REGEX_TEXT[k])) break;
        if (k == sizeof REGEX_TEXT / sizeof REGEX_TEXT[0])
            return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: pre-tokenizer Split pattern '%s' is not one "
                           "this library implements (GPT-2's, Llama 3's, Qwen2's)", re);
        d->kind = TDM_TOK_PRE_SPLIT;
        d->re = (tdm_tok_regex)k;
    } else if (!strcmp(type, "Digits")) {
        d->kind = TDM_TOK_PRE_DIGITS;
        d->individual = get_bool(p, "individual_digits", false);
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = TDM_TOK_PRE_METASPACE;
        d->split = get_bool(p, "split", true);
        TDM_TRY(get_prepend_scheme(p, &d->prepend));
        TDM_TRY(get_replacement(p, d->repl, &d->nrepl));
    } else {
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: pre-tokenizer '%s' is not supported "
                       "(ByteLevel, Split, Digits, Metaspace and Sequences of them are)", type);
    }
    t->n_pre++;
    return NULL;
}

static tdm_status *append_ids(int32_t **arr, size_t *n, const int32_t *ids, size_t k) {
    int32_t *p = realloc(*arr, (*n + k + 1) * sizeof *p);
    if (!p) return oom();
    memcpy(p + *n, ids, k * sizeof *ids);
    *arr = p;
    *n += k;
    return NULL;
}

static tdm_status *prepend_ids(int32_t **arr, size_t *n, const int32_t *ids, size_t k) {
    int32_t *p = malloc((*n + k + 1) * sizeof *p);
    if (!p) return oom();
    memcpy(p, ids, k * sizeof *ids);
    if (*n) memcpy(p + k, *arr, *n * sizeof *p);
    free(*arr);
    *arr = p;
    *n += k;
    return NULL;
}

/* [token, id] of RobertaProcessing / BertProcessing */
static tdm_status *pair_id(const tdm_tokenizer *t, const json_t *pair, int32_t *id) {
    const json_t *v = json_array_get(pair, 1);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (size_t)json_integer_value(v) >= t->n_ids)
        return bad("tokenizer.json: post-processor cls/sep is not [token, id] with a known id%s", NULL);
    *id = (int32_t)json_integer_value(v);
    return NULL;
}

static tdm_status *load_post(tdm_tokenizer *t, const json_t *p, int depth) {
    if (!p || json_is_null(p)) return NULL;
    const char *type = get_type(p);
    if (!type) return bad("tokenizer.json: the post-processor has no 'type'%s", NULL);
    int32_t pre[64], suf[64];
    size_t npre = 0, nsuf = 0;
    if (!strcmp(type, "Sequence") && depth == 0) {
        const json_t *list = json_object_get(p, "processors");
        if (!json_is_array(list)) return bad("tokenizer.json: post-processor Sequence has no 'processors' array%s", NULL);
        for (size_t i = 0; i < json_array_size(list); i++) TDM_TRY(load_post(t, json_array_get(list, i), 1));
        return NULL;
    } else if (!strcmp(type, "ByteLevel")) {
        return NULL; /* offsets only */
    } else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        TDM_TRY(pair_id(t, json_object_get(p, "cls"), &pre[0]));
        TDM_TRY(pair_id(t, json_object_get(p, "sep"), &suf[0]));
        npre = nsuf = 1;
    } else if (!strcmp(type, "TemplateProcessing")) {
        const json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
        if (!json_is_array(single)) return bad("tokenizer.json: TemplateProcessing has no 'single' array%s", NULL);
        bool seen_a = false;
        for (size_t i = 0; i < json_array_size(single); i++) {
            const json_t *item = json_array_get(single, i);
            const json_t *sp = json_object_get(item, "SpecialToken"), *sq = json_object_get(item, "Sequence");
            if (sq) {
                if (seen_a) return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: TemplateProcessing with $A twice");
                seen_a = true;
                continue;
            }
            const json_t *name = json_object_get(sp, "id");
            const json_t *ids = json_object_get(json_object_get(specials, json_string_value(name)), "ids");
            if (!json_is_string(name) || !json_is_array(ids))
                return bad("tokenizer.json: TemplateProcessing names a special token it does not define%s", NULL);
            for (size_t k = 0; k < json_array_size(ids); k++) {
                const json_t *v = json_array_get(ids, k);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || (size_t)json_integer_value(v) >= t->n_ids)
                    return bad("tokenizer.json: TemplateProcessing special token '%s' has an id out of range", json_string_value(name));
                if (npre >= 64 || nsuf >= 64) return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: TemplateProcessing adds too many tokens");
                if (seen_a) suf[nsuf++] = (int32_t)json_integer_value(v);
                else pre[npre++] = (int32_t)json_integer_value(v);
            }
        }
        if (!seen_a) return bad("tokenizer.json: TemplateProcessing 'single' has no $A%s", NULL);
    } else {
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: post-processor '%s' is not supported "
                       "(TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing are)", type);
    }
    /* a later processor wraps the output of an earlier one */
    TDM_TRY(prepend_ids(&t->post_prefix, &t->n_post_prefix, pre, npre));
    return append_ids(&t->post_suffix, &t->n_post_suffix, suf, nsuf);
}

static tdm_status *load_decoder(tdm_tokenizer *t, const json_t *p, int depth) {
    if (!p || json_is_null(p)) return NULL;
    t->has_decoder = true;
    const char *type = get_type(p);
    if (!type) return bad("tokenizer.json: a decoder has no 'type'%s", NULL);
    if (!strcmp(type, "Sequence") && depth == 0) {
        const json_t *list = json_object_get(p, "decoders");
        if (!json_is_array(list)) return bad("tokenizer.json: decoder Sequence has no 'decoders' array%s", NULL);
        for (size_t i = 0; i < json_array_size(list); i++) TDM_TRY(load_decoder(t, json_array_get(list, i), 1));
        return NULL;
    }
    tdm_tok_dec *d = &t->dec[t->n_dec];
    memset(d, 0, sizeof *d);
    if (!strcmp(type, "ByteLevel")) {
        d->kind = TDM_TOK_DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = TDM_TOK_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = TDM_TOK_DEC_FUSE;
    } else if (!strcmp(type, "Replace")) {
        const char *s, *re;
        TDM_TRY(get_pattern(p, "decoder Replace", &s, &re));
        const json_t *c = json_object_get(p, "content");
        if (re) return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: decoder Replace with a regex is not supported");
        if (!json_is_string(c) || !*s) return bad("tokenizer.json: decoder Replace needs a non-empty pattern and a string content%s", NULL);
        d->kind = TDM_TOK_DEC_REPLACE;
        d->a = dup_n(s, strlen(s));
        d->b = dup_n(json_string_value(c), json_string_length(c));
        if (!d->a || !d->b) return oom();
        d->na = strlen(s);
        d->nb = json_string_length(c);
    } else if (!strcmp(type, "Strip")) {
        const json_t *c = json_object_get(p, "content"), *st = json_object_get(p, "start"),
                     *sp = json_object_get(p, "stop");
        uint32_t cp;
        if (!json_is_string(c) || !json_string_length(c) || !json_is_integer(st) || !json_is_integer(sp) ||
            json_integer_value(st) < 0 || json_integer_value(sp) < 0 || json_integer_value(st) > 1 << 20 ||
            json_integer_value(sp) > 1 << 20 ||
            tdm_tok_utf8_valid((const unsigned char *)json_string_value(c), json_string_length(c)) != json_string_length(c) ||
            tdm_tok_utf8_dec((const unsigned char *)json_string_value(c), json_string_length(c), &cp) != json_string_length(c))
            return bad("tokenizer.json: decoder Strip needs a one-character content and start/stop counts%s", NULL);
        d->kind = TDM_TOK_DEC_STRIP;
        if (!(d->a = dup_n(json_string_value(c), json_string_length(c)))) return oom();
        d->na = json_string_length(c);
        d->start = (int)json_integer_value(st);
        d->stop = (int)json_integer_value(sp);
    } else if (!strcmp(type, "Metaspace")) {
        char r[8];
        size_t nr;
        d->kind = TDM_TOK_DEC_METASPACE;
        TDM_TRY(get_prepend_scheme(p, &d->prepend));
        TDM_TRY(get_replacement(p, r, &nr));
        if (!(d->a = dup_n(r, nr))) return oom();
        d->na = nr;
    } else {
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "tokenizer.json: decoder '%s' is not supported (ByteLevel, "
                       "Replace, ByteFallback, Fuse, Strip, Metaspace and Sequences of them are)", type);
    }
    t->n_dec++;
    return NULL;
}

/* Counts the steps of a component (a Sequence's members, or 1), for the arrays. */
static size_t count_steps(const json_t *c, const char *list_key) {
    if (!c || json_is_null(c)) return 0;
    const char *type = get_type(c);
    if (type && !strcmp(type, "Sequence")) return json_array_size(json_object_get(c, list_key));
    return 1;
}

/* ---- tokenizer_config.json ---- */
static const char *token_name(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static tdm_status *load_config(tdm_tokenizer *t, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return NULL; /* optional */
    json_error_t err;
    json_t *root = json_load_file(path, JSON_DECODE_ANY, &err);
    if (!root) return TDM_ERR(TDM_ERR_INVALID_MODEL, "%s: line %d: %s", path, err.line, err.text);
    tdm_status *st = NULL;
    if (!json_is_object(root)) {
        st = TDM_ERR(TDM_ERR_INVALID_MODEL, "%s: not a JSON object", path);
        goto done;
    }
    static const char *const keys[TDM_TOK_N_NAMED] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (int i = 0; i < TDM_TOK_N_NAMED; i++) {
        const char *name = token_name(json_object_get(root, keys[i]));
        if (!name) continue;
        int32_t id = tdm_tokenizer_token_id(t, name);
        if (id < 0) continue; /* a name the vocabulary lacks: as if absent */
        t->named_id[i] = id;
    }
    const json_t *tmpl = json_object_get(root, "chat_template");
    const char *text = NULL;
    if (json_is_string(tmpl)) {
        text = json_string_value(tmpl);
    } else if (json_is_array(tmpl)) { /* [{name, template}]: "default", else the first */
        for (size_t i = 0; i < json_array_size(tmpl); i++) {
            const json_t *e = json_array_get(tmpl, i);
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *tx = json_string_value(json_object_get(e, "template"));
            if (tx && (!text || (name && !strcmp(name, "default")))) text = tx;
        }
    }
    if (text && !(t->chat_template = dup_n(text, strlen(text)))) st = oom();
done:
    json_decref(root);
    return st;
}

static void named_defaults(tdm_tokenizer *t) {
    if (t->named_id[TDM_TOK_BOS] < 0 && t->n_post_prefix) t->named_id[TDM_TOK_BOS] = t->post_prefix[0];
    if (t->named_id[TDM_TOK_UNK] < 0) t->named_id[TDM_TOK_UNK] = t->unk_id;
    static const char *const eos_names[] = {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>", "<eos>"};
    for (size_t i = 0; t->named_id[TDM_TOK_EOS] < 0 && i < sizeof eos_names / sizeof eos_names[0]; i++) {
        int32_t id = tdm_tokenizer_token_id(t, eos_names[i]);
        if (id >= 0 && (t->tok_flags[id] & TDM_TOK_F_SPECIAL)) t->named_id[TDM_TOK_EOS] = id;
    }
    if (t->named_id[TDM_TOK_BOS] < 0) {
        static const char *const bos_names[] = {"<s>", "<|begin_of_text|>", "<bos>"};
        for (size_t i = 0; t->named_id[TDM_TOK_BOS] < 0 && i < 3; i++) {
            int32_t id = tdm_tokenizer_token_id(t, bos_names[i]);
            if (id >= 0 && (t->tok_flags[id] & TDM_TOK_F_SPECIAL)) t->named_id[TDM_TOK_BOS] = id;
        }
    }
    for (int i = 0; i < TDM_TOK_N_NAMED; i++)
        if (t->named_id[i] >= 0) t->named_text[i] = t->tok[t->named_id[i]];
}

/* ---- load / free ---- */
static tdm_status *load_json(tdm_tokenizer *t, const json_t *root) {
    if (!json_is_object(root)) return bad("tokenizer.json: not a JSON object%s", NULL);
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added))
        return bad("tokenizer.json: 'added_tokens' is not an array%s", NULL);
    TDM_TRY(load_model(t, json_object_get(root, "model"), added));
    TDM_TRY(load_added(t, added));
    const json_t *norm = json_object_get(root, "normalizer"), *pre = json_object_get(root, "pre_tokenizer");
    const json_t *dec = json_object_get(root, "decoder");
    size_t nn = count_steps(norm, "normalizers"), np = count_steps(pre, "pretokenizers"),
           nd = count_steps(dec, "decoders");
    t->norm = calloc(nn + 1, sizeof *t->norm);
    t->pre = calloc(np + 1, sizeof *t->pre);
    t->dec = calloc(nd + 1, sizeof *t->dec);
    if (!t->norm || !t->pre || !t->dec) return oom();
    TDM_TRY(load_normalizer(t, norm, 0));
    TDM_TRY(load_pre(t, pre, 0));
    TDM_TRY(load_post(t, json_object_get(root, "post_processor"), 0));
    return load_decoder(t, dec, 0);
}

tdm_status *tdm_tokenizer_load(const char *path, tdm_tokenizer **out) {
    if (!path || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tokenizer_load: NULL argument");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return TDM_ERR(errno == ENOENT ? TDM_ERR_NOT_FOUND : TDM_ERR_IO, "tokenizer '%s': %s", path, strerror(errno));
    size_t n = strlen(path);
    char *file = malloc(n + 32), *config = malloc(n + 32);
    if (!file || !config) {
        free(file);
        free(config);
        return oom();
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(file, n + 32, "%s/tokenizer.json", path);
        snprintf(config, n + 32, "%s/tokenizer_config.json", path);
    } else {
        memcpy(file, path, n + 1);
        const char *slash = strrchr(path, '/');
        size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
        memcpy(config, path, dir);
        memcpy(config + dir, "tokenizer_config.json", 22);
    }
    tdm_status *st = NULL;
    tdm_tokenizer *t = calloc(1, sizeof *t);
    json_error_t err;
    json_t *root = NULL;
    if (!t) {
        st = oom();
        goto done;
    }
    for (int i = 0; i < TDM_TOK_N_NAMED; i++) t->named_id[i] = -1;
    t->unk_id = -1;
    if (stat(file, &sb) != 0) {
        st = TDM_ERR(errno == ENOENT ? TDM_ERR_NOT_FOUND : TDM_ERR_IO, "tokenizer '%s': %s", file, strerror(errno));
        goto done;
    }
    root = json_load_file(file, 0, &err);
    if (!root) {
        st = TDM_ERR(TDM_ERR_INVALID_MODEL, "%s: line %d: %s", file, err.line, err.text);
        goto done;
    }
    st = load_json(t, root);
    if (!st) st = load_config(t, config);
    if (!st) named_defaults(t);
    if (st) st = tdm_status_wrap(st, "loading tokenizer '%s': ", file);
done:
    json_decref(root);
    free(file);
    free(config);
    if (st) {
        tdm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return NULL;
}

void tdm_tokenizer_free(tdm_tokenizer *t) {
    if (!t) return;
    for (size_t i = 0; t->tok && i < t->n_ids; i++) free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->tok_flags);
    free(t->vh);
    free(t->mh);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    for (size_t i = 0; t->norm && i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    free(t->pre);
    for (size_t i = 0; t->dec && i < t->n_dec; i++) {
        free(t->dec[i].a);
        free(t->dec[i].b);
    }
    free(t->dec);
    free(t->post_prefix);
    free(t->post_suffix);
    free(t->chat_template);
    free(t);
}

/* ---- lookups ---- */
size_t tdm_tokenizer_vocab_size(const tdm_tokenizer *t) { return t ? t->n_ids : 0; }

int32_t tdm_tokenizer_token_id(const tdm_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    for (size_t i = 0; n && i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, token, n)) return t->added[i].id;
    return tdm_tok_vocab_find(t, token, n);
}

const char *tdm_tokenizer_token(const tdm_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (size_t)id >= t->n_ids) return NULL;
    return t->tok[id];
}

bool tdm_tokenizer_is_special(const tdm_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (size_t)id >= t->n_ids) return false;
    return (t->tok_flags[id] & TDM_TOK_F_SPECIAL) != 0;
}

static int named_index(const char *which) {
    static const char *const names[TDM_TOK_N_NAMED] = {"bos", "eos", "unk", "pad"};
    for (int i = 0; which && i < TDM_TOK_N_NAMED; i++)
        if (!strcmp(which, names[i])) return i;
    return -1;
}

int32_t tdm_tokenizer_special_id(const tdm_tokenizer *t, const char *which) {
    int i = named_index(which);
    return t && i >= 0 ? t->named_id[i] : -1;
}

const char *tdm_tokenizer_special_text(const tdm_tokenizer *t, const char *which) {
    int i = named_index(which);
    return t && i >= 0 ? t->named_text[i] : NULL;
}

const char *tdm_tokenizer_chat_template(const tdm_tokenizer *t) { return t ? t->chat_template : NULL; }

/* Chat templates: global functions, methods, filters and tests (see chat_template_impl.h),
 * and the UTF-8 helpers. Strings are sequences of code points as in Python: length,
 * indexing and slicing count code points, strip/split/isspace use Python's whitespace. Case
 * mapping (upper, lower, capitalize, title) covers ASCII, Latin-1, Latin Extended-A, and
 * the basic Greek and Cyrillic letters, one code point to one (no ß -> SS, no final sigma);
 * other characters are left as they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llm/chat_template_impl.h"

/* ---- UTF-8 ------------------------------------------------------------------------- */

static size_t cp_len(unsigned char c) { return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2; }

static uint32_t decode(const char *s, size_t len, size_t *n) {
    unsigned char c = (unsigned char)s[0];
    size_t k = cp_len(c);
    if (k > len) k = len;
    uint32_t cp = k == 1 ? c : (uint32_t)(c & (0x3F >> (k - 1)));
    for (size_t i = 1; i < k; i++) cp = (cp << 6) | ((unsigned char)s[i] & 0x3F);
    *n = k;
    return cp;
}

size_t ct_utf8_put(char *d, uint32_t cp) {
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ct_utf8_count(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

size_t ct_utf8_offset(const char *s, size_t len, size_t index) {
    size_t i = 0;
    while (index && i < len) {
        i += cp_len((unsigned char)s[i]);
        index--;
    }
    return i < len ? i : len;
}

static bool space_cp(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

bool ct_is_space(const char *s, size_t len, size_t *n) { return space_cp(decode(s, len, n)); }

bool ct_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            while (i + 8 <= len) { /* ASCII runs, 8 bytes at a time */
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull) break;
                i += 8;
            }
            continue;
        }
        size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > len) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        if (c == 0xE0 && s[i + 1] < 0xA0) return false; /* overlong */
        if (c == 0xED && s[i + 1] >= 0xA0) return false; /* surrogate */
        if (c == 0xF0 && s[i + 1] < 0x90) return false; /* overlong */
        if (c == 0xF4 && s[i + 1] >= 0x90) return false; /* past U+10FFFF */
        i += k;
    }
    return true;
}

/* ---- case mapping ------------------------------------------------------------------ */

static bool latin_a_upper_is_even(uint32_t c) {
    return (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
}
static bool latin_a_upper_is_odd(uint32_t c) {
    return (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
}

static uint32_t to_upper(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (latin_a_upper_is_even(c) && c != 0x130 && (c & 1)) return c - 1;
    if (latin_a_upper_is_odd(c) && !(c & 1)) return c - 1;
    if ((c >= 0x3B1 && c <= 0x3C1) || (c >= 0x3C3 && c <= 0x3CB)) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

static uint32_t to_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (latin_a_upper_is_even(c) && c != 0x130 && c != 0x131 && !(c & 1)) return c + 1;
    if (latin_a_upper_is_odd(c) && (c & 1)) return c + 1;
    if ((c >= 0x391 && c <= 0x3A1) || (c >= 0x3A3 && c <= 0x3AB)) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

static bool is_cased(uint32_t c) { return to_upper(c) != c || to_lower(c) != c; }

typedef enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_PY, CASE_TITLE_JINJA } case_op;

/* Lower case of c; a capital sigma becomes the final form when a cased letter precedes it
 * and none follows (Python's Final_Sigma, without its case-ignorable characters). */
static uint32_t lower_at(uint32_t c, bool prev_cased, const char *next, size_t left) {
    if (c != 0x3A3) return to_lower(c);
    size_t n;
    bool next_cased = left && is_cased(decode(next, left, &n));
    return prev_cased && !next_cased ? 0x3C2 : 0x3C3;
}

static ct_value *map_case(ct_ctx *ctx, const ct_value *v, case_op op) {
    /* every mapping here keeps or shortens the UTF-8 length: the result fits in len bytes */
    if (!ct_work(ctx, v->str.len, 0)) return NULL;
    char *d = ct_alloc(ctx, v->str.len + 1);
    if (!d) return NULL;
    size_t i = 0, o = 0, n;
    const char *s = v->str.s;
    bool prev_cased = false, word_start = true, first = true;
    while (i < v->str.len) {
        uint32_t c = decode(s + i, v->str.len - i, &n), m = c;
        const char *next = s + i + n;
        size_t left = v->str.len - i - n;
        bool cased = is_cased(c);
        switch (op) {
        case CASE_UPPER: m = to_upper(c); break;
        case CASE_LOWER: m = lower_at(c, prev_cased, next, left); break;
        case CASE_CAPITALIZE: m = first ? to_upper(c) : lower_at(c, prev_cased, next, left); break;
        case CASE_TITLE_PY: m = prev_cased ? lower_at(c, prev_cased, next, left) : to_upper(c); break;
        case CASE_TITLE_JINJA: { /* words start after -, whitespace, (, {, [, < */
            bool delim = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || space_cp(c);
            m = delim ? c : word_start ? to_upper(c) : lower_at(c, prev_cased, next, left);
            if (word_start && !delim) cased = false; /* the rest of the word is lowered alone */
            word_start = delim;
            break;
        }
        }
        prev_cased = cased;
        first = false;
        o += ct_utf8_put(d + o, m);
        i += n;
    }
    d[o] = 0;
    return ct_str_own(ctx, d, o);
}

/* ---- arguments --------------------------------------------------------------------- */

#define CT_MAX_ARGS 8

typedef struct ct_args {
    ct_value *pos[CT_MAX_ARGS];
    size_t n_pos;
    const char *kw[CT_MAX_ARGS];
    ct_value *kwv[CT_MAX_ARGS];
    size_t n_kw;
} ct_args;

static const char *what_of(const ct_expr *e) {
    switch (e->kind) {
    case CE_FILTER: return "filter";
    case CE_TEST: return "test";
    case CE_METHOD: return "method";
    default: return "function";
    }
}

/* Evaluates e's arguments. `names` lists the parameters in order (comma separated); a
 * keyword must be one of them, positionals fill them from the start. NULL = any keywords,
 * no limit on positionals (up to CT_MAX_ARGS). */
static bool eval_args(ct_ctx *ctx, const ct_expr *e, ct_args *a, const char *names) {
    memset(a, 0, sizeof *a);
    if (e->n > CT_MAX_ARGS)
        return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "%zu arguments to the %s '%s'", e->n,
                       what_of(e), e->name) != NULL;
    size_t n_params = 0;
    if (names) {
        n_params = *names ? 1 : 0;
        for (const char *p = names; *p; p++) n_params += *p == ',';
    }
    for (size_t i = 0; i < e->n; i++) {
        ct_value *v = ct_eval(ctx, e->args[i]);
        if (!v) return false;
        if (e->argnames[i]) {
            if (names) {
                size_t kl = strlen(e->argnames[i]);
                const char *p = names;
                bool ok = false;
                while (*p && !ok) {
                    const char *c = strchr(p, ',');
                    size_t l = c ? (size_t)(c - p) : strlen(p);
                    ok = l == kl && memcmp(p, e->argnames[i], l) == 0;
                    p = c ? c + 1 : p + l;
                }
                if (!ok) {
                    ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "argument '%s' of the %s '%s'",
                            e->argnames[i], what_of(e), e->name);
                    return false;
                }
            }
            a->kw[a->n_kw] = e->argnames[i];
            a->kwv[a->n_kw++] = v;
        } else {
            if (names && a->n_pos >= n_params) {
                ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line,
                        "too many arguments to the %s '%s'", what_of(e), e->name);
                return false;
            }
            a->pos[a->n_pos++] = v;
        }
    }
    return true;
}

/* Parameter `index` (named `kw`) or NULL. */
static ct_value *arg(const ct_args *a, size_t index, const char *kw) {
    if (index < a->n_pos) return a->pos[index];
    for (size_t i = 0; kw && i < a->n_kw; i++)
        if (strcmp(a->kw[i], kw) == 0) return a->kwv[i];
    return NULL;
}

static bool is_num(const ct_value *v) { return v->kind == CV_INT || v->kind == CV_BOOL; }
static int64_t num(const ct_value *v) { return v->kind == CV_BOOL ? (int64_t)v->b : v->i; }
static bool absent(const ct_value *v) { return !v || v->kind == CV_NONE; }

static void *type_error(ct_ctx *ctx, const ct_expr *e, const char *want, const ct_value *got) {
    if (got && got->kind == CV_UNDEF)
        return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "'%s' is undefined",
                       got->undef_name ? got->undef_name : "value");
    return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "the %s '%s' needs %s, not %s",
                   what_of(e), e->name, want, got ? ct_kind_name(got) : "nothing");
}

static bool need_str(ct_ctx *ctx, const ct_expr *e, const ct_value *v) {
    if (v && v->kind == CV_STR) return true;
    type_error(ctx, e, "a string", v);
    return false;
}

/* ---- strings ----------------------------------------------------------------------- */

static bool in_chars(uint32_t c, const ct_value *chars) {
    size_t i = 0, n;
    while (i < chars->str.len) {
        if (decode(chars->str.s + i, chars->str.len - i, &n) == c) return true;
        i += n;
    }
    return false;
}

/* Python's strip/lstrip/rstrip; chars NULL = whitespace. */
static ct_value *strip(ct_ctx *ctx, const ct_value *v, const ct_value *chars, bool left, bool right) {
    const char *s = v->str.s;
    size_t start = 0, end = v->str.len, n;
    size_t per = chars ? chars->str.len + 1 : 1;
    while (left && start < end) { /* from the front */
        uint32_t c = decode(s + start, end - start, &n);
        if (!(chars ? in_chars(c, chars) : space_cp(c))) break;
        start += n;
    }
    while (right && end > start) { /* from the back: to the lead byte of the last code point */
        size_t k = end - 1;
        while (k > start && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        uint32_t c = decode(s + k, end - k, &n);
        if (!(chars ? in_chars(c, chars) : space_cp(c))) break;
        end = k;
    }
    size_t scanned = start + (v->str.len - end) + 1;
    if (!ct_work(ctx, scanned > CT_MAX_WORK / per ? CT_MAX_WORK : scanned * per, 0)) return NULL;
    return ct_str(ctx, s + start, end - start);
}

static bool has_prefix(const ct_value *s, const ct_value *p, bool suffix) {
    if (p->str.len > s->str.len) return false;
    const char *at = suffix ? s->str.s + s->str.len - p->str.len : s->str.s;
    return memcmp(at, p->str.s, p->str.len) == 0;
}

static ct_value *starts_ends(ct_ctx *ctx, const ct_expr *e, ct_value *self, bool suffix) {
    ct_args a;
    if (!eval_args(ctx, e, &a, "prefix")) return NULL;
    ct_value *p = arg(&a, 0, NULL);
    if (p && p->kind == CV_LIST) {
        for (size_t i = 0; i < p->list.n; i++) {
            if (!need_str(ctx, e, p->list.items[i])) return NULL;
            if (has_prefix(self, p->list.items[i], suffix)) return ctx->vtrue;
        }
        return ctx->vfalse;
    }
    if (!need_str(ctx, e, p)) return NULL;
    return ct_bool(ctx, has_prefix(self, p, suffix));
}

static bool list_push(ct_ctx *ctx, ct_value *l, size_t *cap, ct_value *v) {
    if (!v) return false;
    if (l->list.n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        ct_value **ni = ct_alloc(ctx, ncap * sizeof *ni);
        if (!ni) return false;
        if (l->list.n) memcpy(ni, l->list.items, l->list.n * sizeof *ni);
        l->list.items = ni;
        *cap = ncap;
    }
    l->list.items[l->list.n++] = v;
    return true;
}

static ct_value *split(ct_ctx *ctx, const ct_expr *e, ct_value *self) {
    ct_args a;
    if (!eval_args(ctx, e, &a, "sep,maxsplit")) return NULL;
    ct_value *sep = arg(&a, 0, "sep"), *maxv = arg(&a, 1, "maxsplit");
    int64_t max = -1;
    if (maxv) {
        if (!is_num(maxv)) return type_error(ctx, e, "an integer maxsplit", maxv);
        max = num(maxv);
    }
    ct_value *l = ct_list(ctx, 0);
    size_t cap = 0;
    if (!l) return NULL;
    const char *s = self->str.s;
    size_t len = self->str.len, i = 0, n;
    if (absent(sep)) { /* runs of whitespace, no empty parts */
        while (i < len) {
            while (i < len && ct_is_space(s + i, len - i, &n)) i += n;
            if (i >= len) break;
            size_t start = i;
            if (max >= 0 && (int64_t)l->list.n == max) {
                size_t end = len;
                while (end > start) { /* the rest, without trailing whitespace */
                    size_t k = start, last = start;
                    while (k < end) {
                        bool sp = ct_is_space(s + k, end - k, &n);
                        k += n;
                        if (!sp) last = k;
                    }
                    end = last;
                    break;
                }
                if (!list_push(ctx, l, &cap, ct_str(ctx, s + start, end - start))) return NULL;
                break;
            }
            while (i < len && !ct_is_space(s + i, len - i, &n)) i += n;
            if (!list_push(ctx, l, &cap, ct_str(ctx, s + start, i - start))) return NULL;
        }
        return l;
    }
    if (!need_str(ctx, e, sep)) return NULL;
    if (sep->str.len == 0) return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "empty separator");
    for (;;) {
        const char *hit = max >= 0 && (int64_t)l->list.n == max
                              ? NULL
                              : ct_search(ctx, s + i, len - i, sep->str.s, sep->str.len, e->line);
        if (ctx->err) return NULL;
        size_t end = hit ? (size_t)(hit - s) : len;
        if (!list_push(ctx, l, &cap, ct_str(ctx, s + i, end - i))) return NULL;
        if (!hit) break;
        i = end + sep->str.len;
    }
    return l;
}

static ct_value *replace(ct_ctx *ctx, const ct_expr *e, ct_value *self, const ct_args *a) {
    ct_value *old = arg(a, 0, "old"), *new = arg(a, 1, "new"), *countv = arg(a, 2, "count");
    if (!need_str(ctx, e, old) || !need_str(ctx, e, new)) return NULL;
    int64_t count = -1;
    if (countv && !absent(countv)) {
        if (!is_num(countv)) return type_error(ctx, e, "an integer count", countv);
        count = num(countv);
    }
    ct_sb sb = {0};
    const char *s = self->str.s;
    size_t len = self->str.len, i = 0;
    bool ok = true;
    if (old->str.len == 0) { /* Python inserts `new` around every code point */
        size_t n;
        for (; ok && count != 0; count--) {
            ok = ct_sb_put(ctx, &sb, new->str.s, new->str.len);
            if (i >= len) break;
            n = cp_len((unsigned char)s[i]);
            ok = ok && ct_sb_put(ctx, &sb, s + i, n);
            i += n;
        }
    } else {
        for (; ok && count != 0; count--) {
            const char *hit = ct_search(ctx, s + i, len - i, old->str.s, old->str.len, e->line);
            if (!hit) {
                ok = !ctx->err;
                break;
            }
            ok = ct_sb_put(ctx, &sb, s + i, (size_t)(hit - s) - i) &&
                 ct_sb_put(ctx, &sb, new->str.s, new->str.len);
            i = (size_t)(hit - s) + old->str.len;
        }
    }
    if (!ok || !ct_sb_put(ctx, &sb, s + i, len - i)) {
        free(sb.s);
        return NULL;
    }
    return ct_sb_finish(ctx, &sb);
}

static ct_value *join(ct_ctx *ctx, const ct_expr *e, ct_value *seq, ct_value *sep,
                      ct_value *attribute) {
    size_t n;
    ct_value **items = ct_iterate(ctx, seq, &n, e->line);
    if (!items) return NULL;
    ct_sb sb = {0};
    for (size_t i = 0; i < n; i++) {
        ct_value *v = items[i];
        if (attribute) {
            v = attribute->kind == CV_STR && v->kind == CV_DICT
                    ? ct_dict_get(v, attribute->str.s, attribute->str.len)
                    : NULL;
            if (!v) v = ctx->undef;
        }
        ct_value *s = ct_to_str(ctx, v);
        if (!s || (i && sep && !ct_sb_put(ctx, &sb, sep->str.s, sep->str.len)) ||
            !ct_sb_put(ctx, &sb, s->str.s, s->str.len)) {
            free(sb.s);
            return NULL;
        }
    }
    return ct_sb_finish(ctx, &sb);
}

/* ---- JSON (transformers' tojson: ensure_ascii=False, separators ", " and ": ") ---------- */

static bool put_json(ct_ctx *ctx, ct_sb *sb, const ct_value *v, int depth, int line) {
    if (depth > CT_MAX_DEPTH)
        return ct_fail(ctx, TDM_ERR_LIMIT, line, "tojson of a value nested deeper than %d levels",
                       CT_MAX_DEPTH) != NULL;
    char buf[32];
    switch (v->kind) {
    case CV_NONE: return ct_sb_put(ctx, sb, "null", 4);
    case CV_BOOL: return v->b ? ct_sb_put(ctx, sb, "true", 4) : ct_sb_put(ctx, sb, "false", 5);
    case CV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v->i);
        return ct_sb_put(ctx, sb, buf, strlen(buf));
    case CV_STR: {
        if (!ct_sb_put(ctx, sb, "\"", 1)) return false;
        for (size_t i = 0; i < v->str.len; i++) {
            unsigned char c = (unsigned char)v->str.s[i];
            const char *e = NULL;
            switch (c) {
            case '"': e = "\\\""; break;
            case '\\': e = "\\\\"; break;
            case '\n': e = "\\n"; break;
            case '\r': e = "\\r"; break;
            case '\t': e = "\\t"; break;
            case '\b': e = "\\b"; break;
            case '\f': e = "\\f"; break;
            default:
                if (c < 0x20) {
                    snprintf(buf, sizeof buf, "\\u%04x", c);
                    e = buf;
                }
            }
            if (e ? !ct_sb_put(ctx, sb, e, strlen(e)) : !ct_sb_put(ctx, sb, (const char *)&c, 1))
                return false;
        }
        return ct_sb_put(ctx, sb, "\"", 1);
    }
    case CV_LIST:
        if (!ct_sb_put(ctx, sb, "[", 1)) return false;
        for (size_t i = 0; i < v->list.n; i++)
            if ((i && !ct_sb_put(ctx, sb, ", ", 2)) || !put_json(ctx, sb, v->list.items[i], depth + 1, line))
                return false;
        return ct_sb_put(ctx, sb, "]", 1);
    case CV_DICT:
        if (v->ns) break;
        if (!ct_sb_put(ctx, sb, "{", 1)) return false;
        for (size_t i = 0; i < v->dict.n; i++) {
            const ct_value *k = v->dict.keys[i];
            if (i && !ct_sb_put(ctx, sb, ", ", 2)) return false;
            if (k->kind == CV_STR) {
                if (!put_json(ctx, sb, k, depth + 1, line)) return false;
            } else {
                if (!ct_sb_put(ctx, sb, "\"", 1) || !put_json(ctx, sb, k, depth + 1, line) ||
                    !ct_sb_put(ctx, sb, "\"", 1))
                    return false;
            }
            if (!ct_sb_put(ctx, sb, ": ", 2) || !put_json(ctx, sb, v->dict.vals[i], depth + 1, line))
                return false;
        }
        return ct_sb_put(ctx, sb, "}", 1);
    case CV_UNDEF:
        return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "'%s' is undefined",
                       v->undef_name ? v->undef_name : "value") != NULL;
    default: break;
    }
    return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "Object of type %s is not JSON serializable",
                   ct_kind_name(v)) != NULL;
}

/* ---- global functions -------------------------------------------------------------- */

static ct_value *make_dict(ct_ctx *ctx, const ct_expr *e, bool ns) {
    ct_args a;
    if (!eval_args(ctx, e, &a, NULL)) return NULL;
    ct_value *d = ct_dict(ctx);
    if (!d) return NULL;
    d->ns = ns;
    if (a.n_pos > 1) return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "%s() takes at most one positional argument", e->name);
    if (a.n_pos) {
        ct_value *src = a.pos[0];
        if (src->kind != CV_DICT || src->ns) return type_error(ctx, e, "a dict", src);
        for (size_t i = 0; i < src->dict.n; i++)
            if (!ct_dict_set(ctx, d, src->dict.keys[i], src->dict.vals[i])) return NULL;
    }
    for (size_t i = 0; i < a.n_kw; i++) {
        ct_value *k = ct_str(ctx, a.kw[i], strlen(a.kw[i]));
        if (!k || !ct_dict_set(ctx, d, k, a.kwv[i])) return NULL;
    }
    return d;
}

ct_value *ct_call(ct_ctx *ctx, const ct_expr *e) {
    ct_args a;
    const char *name = e->name;
    if (strcmp(name, "raise_exception") == 0) {
        if (!eval_args(ctx, e, &a, "message")) return NULL;
        ct_value *m = arg(&a, 0, "message");
        ct_value *s = m ? ct_to_str(ctx, m) : ctx->empty_str;
        if (!s) return NULL;
        size_t len = s->str.len;
        if (s->str.len > 400) { /* cut long messages at a code point */
            len = 400;
            while (len && ((unsigned char)s->str.s[len] & 0xC0) == 0x80) len--;
        }
        return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, 0, "chat template error: %.*s%s", (int)len,
                       s->str.s, len < s->str.len ? "..." : "");
    }
    if (strcmp(name, "range") == 0) {
        if (!eval_args(ctx, e, &a, "start,stop,step")) return NULL;
        if (a.n_pos == 0) return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "range expected at least 1 argument");
        for (size_t i = 0; i < a.n_pos; i++)
            if (!is_num(a.pos[i])) return type_error(ctx, e, "integers", a.pos[i]);
        int64_t start = 0, stop, step = 1;
        if (a.n_pos == 1) {
            stop = num(a.pos[0]);
        } else {
            start = num(a.pos[0]);
            stop = num(a.pos[1]);
            if (a.n_pos == 3) step = num(a.pos[2]);
        }
        if (step == 0) return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "range() arg 3 must not be zero");
        uint64_t count = 0;
        if (step > 0 && start < stop) count = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
        if (step < 0 && start > stop) count = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)0 - (uint64_t)step) + 1;
        if (count > CT_MAX_ITERATIONS)
            return ct_fail(ctx, TDM_ERR_LIMIT, e->line, "range of %llu items (the limit is %d)",
                           (unsigned long long)count, CT_MAX_ITERATIONS);
        ct_value *l = ct_list(ctx, (size_t)count);
        if (!l) return NULL;
        for (size_t i = 0; i < count; i++)
            if (!(l->list.items[i] = ct_int(ctx, start + (int64_t)i * step))) return NULL;
        return l;
    }
    if (strcmp(name, "namespace") == 0) return make_dict(ctx, e, true);
    if (strcmp(name, "dict") == 0) return make_dict(ctx, e, false);
    if (strcmp(name, "strftime_now") == 0) { /* transformers: the local time, strftime's format */
        if (!eval_args(ctx, e, &a, "format")) return NULL;
        ct_value *f = arg(&a, 0, "format");
        if (!need_str(ctx, e, f)) return NULL;
        if (f->str.len > 200) return ct_fail(ctx, TDM_ERR_LIMIT, e->line, "strftime_now format longer than 200 bytes");
        char fmt[256], buf[512];
        memcpy(fmt, f->str.s, f->str.len);
        fmt[f->str.len] = 0;
        time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm)) return ct_fail(ctx, TDM_ERR_RUNTIME, e->line, "no local time");
        size_t n = fmt[0] ? strftime(buf, sizeof buf, fmt, &tm) : 0;
        if (fmt[0] && n == 0) return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "strftime_now format '%s'", fmt);
        if (!ct_utf8_valid(buf, n)) return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "strftime_now gave text that is not UTF-8");
        return ct_str(ctx, buf, n);
    }
    return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "the function '%s'", name);
}

bool ct_is_function(const char *name) {
    static const char *const NAMES[] = {"raise_exception", "range", "namespace", "dict",
                                        "strftime_now"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(name, NAMES[i]) == 0) return true;
    return false;
}

/* ---- methods ----------------------------------------------------------------------- */

static ct_value *pairs(ct_ctx *ctx, const ct_value *d) {
    ct_value *l = ct_list(ctx, d->dict.n);
    if (!l) return NULL;
    for (size_t i = 0; i < d->dict.n; i++) {
        ct_value *p = ct_list(ctx, 2);
        if (!p) return NULL;
        p->tuple = true;
        p->list.items[0] = d->dict.keys[i];
        p->list.items[1] = d->dict.vals[i];
        l->list.items[i] = p;
    }
    return l;
}

ct_value *ct_method(ct_ctx *ctx, const ct_expr *e, ct_value *self) {
    const char *m = e->name;
    ct_args a;
#define IS(s) (strcmp(m, s) == 0)
    if (self->kind == CV_UNDEF) return type_error(ctx, e, "a value", self);
    if (self->kind == CV_STR) {
        if (IS("strip") || IS("lstrip") || IS("rstrip")) {
            if (!eval_args(ctx, e, &a, "chars")) return NULL;
            ct_value *chars = arg(&a, 0, "chars");
            if (absent(chars)) chars = NULL;
            else if (!need_str(ctx, e, chars)) return NULL;
            return strip(ctx, self, chars, m[0] != 'r', m[0] != 'l');
        }
        if (IS("startswith")) return starts_ends(ctx, e, self, false);
        if (IS("endswith")) return starts_ends(ctx, e, self, true);
        if (IS("split")) return split(ctx, e, self);
        if (IS("upper") || IS("lower") || IS("capitalize") || IS("title")) {
            if (!eval_args(ctx, e, &a, "")) return NULL;
            return map_case(ctx, self, IS("upper") ? CASE_UPPER : IS("lower") ? CASE_LOWER
                                       : IS("capitalize") ? CASE_CAPITALIZE : CASE_TITLE_PY);
        }
        if (IS("replace")) {
            if (!eval_args(ctx, e, &a, "old,new,count")) return NULL;
            return replace(ctx, e, self, &a);
        }
        if (IS("join")) {
            if (!eval_args(ctx, e, &a, "iterable")) return NULL;
            ct_value *seq = arg(&a, 0, NULL);
            if (!seq) return type_error(ctx, e, "an iterable", seq);
            size_t n;
            ct_value **items = ct_iterate(ctx, seq, &n, e->line);
            if (!items) return NULL;
            for (size_t i = 0; i < n; i++)
                if (!need_str(ctx, e, items[i])) return NULL;
            return join(ctx, e, seq, self, NULL);
        }
        if (IS("find") || IS("count")) {
            if (!eval_args(ctx, e, &a, "sub")) return NULL;
            ct_value *sub = arg(&a, 0, NULL);
            if (!need_str(ctx, e, sub)) return NULL;
            if (IS("find")) {
                const char *hit = ct_search(ctx, self->str.s, self->str.len, sub->str.s, sub->str.len, e->line);
                if (ctx->err) return NULL;
                return ct_int(ctx, hit ? (int64_t)ct_utf8_count(self->str.s, (size_t)(hit - self->str.s)) : -1);
            }
            if (sub->str.len == 0) return ct_int(ctx, (int64_t)ct_utf8_count(self->str.s, self->str.len) + 1);
            int64_t c = 0;
            for (const char *p = self->str.s, *end = p + self->str.len;
                 (p = ct_search(ctx, p, (size_t)(end - p), sub->str.s, sub->str.len, e->line)); p += sub->str.len)
                c++;
            return ctx->err ? NULL : ct_int(ctx, c);
        }
    } else if (self->kind == CV_DICT && !self->ns) {
        if (IS("items") || IS("keys") || IS("values")) {
            if (!eval_args(ctx, e, &a, "")) return NULL;
            if (IS("items")) return pairs(ctx, self);
            ct_value *l = ct_list(ctx, self->dict.n);
            if (!l) return NULL;
            for (size_t i = 0; i < self->dict.n; i++)
                l->list.items[i] = IS("keys") ? self->dict.keys[i] : self->dict.vals[i];
            return l;
        }
        if (IS("get")) {
            if (!eval_args(ctx, e, &a, "key,default")) return NULL;
            ct_value *k = arg(&a, 0, NULL), *d = arg(&a, 1, NULL);
            if (!k) return type_error(ctx, e, "a key", k);
            for (size_t i = 0; i < self->dict.n; i++)
                if (ct_equal(self->dict.keys[i], k)) return self->dict.vals[i];
            return d ? d : ctx->none;
        }
    } else if (self->kind == CV_LIST && (IS("count") || IS("index"))) {
        if (!eval_args(ctx, e, &a, "value")) return NULL;
        ct_value *x = arg(&a, 0, NULL);
        if (!x) return type_error(ctx, e, "a value", x);
        if (!ct_work(ctx, self->list.n, e->line)) return NULL;
        int64_t c = 0;
        for (size_t i = 0; i < self->list.n; i++) {
            if (!ct_equal(self->list.items[i], x)) continue;
            if (IS("index")) return ct_int(ctx, (int64_t)i);
            c++;
        }
        if (IS("index")) return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "list.index(x): x not in list");
        return ct_int(ctx, c);
    } else if (self->kind == CV_LOOP && IS("cycle")) {
        if (!eval_args(ctx, e, &a, NULL)) return NULL;
        if (a.n_pos == 0) return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "no items for cycling given");
        return a.pos[self->loop->pos % a.n_pos];
    }
#undef IS
    return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "the method '%s' of a %s", m, ct_kind_name(self));
}

/* ---- tests ------------------------------------------------------------------------- */

/* The test `name` of v with argument `targ` (may be NULL): 0/1, or -1 with the error set
 * (-2: unknown test, error set). */
static int run_test(ct_ctx *ctx, const char *name, int line, ct_value *v, ct_value *targ) {
#define IS(s) (strcmp(name, s) == 0)
    static const char *const NO_ARG[] = {"defined", "undefined", "none", "string", "number",
                                         "integer", "boolean", "true", "false", "mapping",
                                         "iterable", "sequence", "callable", "lower", "upper",
                                         "even", "odd"};
    for (size_t i = 0; targ && i < sizeof NO_ARG / sizeof NO_ARG[0]; i++)
        if (IS(NO_ARG[i])) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "the test '%s' takes no argument", name);
            return -1;
        }
    if (IS("defined")) return v->kind != CV_UNDEF;
    if (IS("undefined")) return v->kind == CV_UNDEF;
    if (IS("none")) return v->kind == CV_NONE;
    if (IS("string")) return v->kind == CV_STR;
    if (IS("number")) return v->kind == CV_INT || v->kind == CV_BOOL;
    if (IS("integer")) return v->kind == CV_INT;
    if (IS("boolean")) return v->kind == CV_BOOL;
    if (IS("true")) return v->kind == CV_BOOL && v->b;
    if (IS("false")) return v->kind == CV_BOOL && !v->b;
    if (IS("mapping")) return v->kind == CV_DICT && !v->ns;
    if (IS("iterable")) return v->kind == CV_STR || v->kind == CV_LIST || v->kind == CV_UNDEF ||
                               (v->kind == CV_DICT && !v->ns);
    if (IS("sequence")) return v->kind == CV_STR || v->kind == CV_LIST || v->kind == CV_UNDEF ||
                               (v->kind == CV_DICT && !v->ns);
    if (IS("callable")) return v->kind == CV_FUNC;
    if (IS("lower") || IS("upper")) {
        if (v->kind != CV_STR) {
            ct_value *s = ct_to_str(ctx, v);
            if (!s) return -1;
            v = s;
        }
        /* Python's islower/isupper: some cased character, and none of the other case */
        ct_value *m = map_case(ctx, v, IS("lower") ? CASE_LOWER : CASE_UPPER);
        if (!m) return -1;
        bool cased = false;
        for (size_t i = 0, n; i < v->str.len && !cased; i += n)
            cased = is_cased(decode(v->str.s + i, v->str.len - i, &n));
        return cased && ct_equal(m, v);
    }
    if (IS("even") || IS("odd") || IS("divisibleby")) {
        if (!is_num(v) || (IS("divisibleby") && (!targ || !is_num(targ) || num(targ) == 0))) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "the test '%s' needs integers", name);
            return -1;
        }
        int64_t x = num(v);
        if (IS("divisibleby")) return x % num(targ) == 0;
        return (x % 2 != 0) == IS("odd");
    }
    bool eq = IS("eq") || IS("equalto") || IS("=="), ne = IS("ne") || IS("!=");
    if (eq || ne || IS("sameas") || IS("in") || IS("lt") || IS("<") || IS("gt") || IS(">") ||
        IS("le") || IS("<=") || IS("ge") || IS(">=")) {
        if (!targ) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "the test '%s' needs an argument", name);
            return -1;
        }
        if (eq) return ct_equal(v, targ);
        if (ne) return !ct_equal(v, targ);
        if (IS("sameas"))
            return v == targ || (v->kind == targ->kind && (v->kind == CV_NONE ||
                                 (v->kind == CV_BOOL && v->b == targ->b)));
        if (IS("in")) return ct_contains(ctx, targ, v, line);
        int c = ct_order(ctx, v, targ, name, line);
        if (c == 2) return -1;
        if (name[0] == 'l' || name[0] == '<') return name[1] == 'e' || name[1] == '=' ? c <= 0 : c < 0;
        return name[1] == 'e' || name[1] == '=' ? c >= 0 : c > 0;
    }
#undef IS
    ct_fail(ctx, TDM_ERR_UNSUPPORTED, line, "the test '%s'", name);
    return -2;
}

ct_value *ct_test(ct_ctx *ctx, const ct_expr *e, ct_value *self) {
    ct_args a;
    if (!eval_args(ctx, e, &a, NULL)) return NULL;
    if (a.n_pos > 1 || a.n_kw)
        return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "the test '%s' with these arguments", e->name);
    int r = run_test(ctx, e->name, e->line, self, arg(&a, 0, NULL));
    if (r < 0) return NULL;
    return ct_bool(ctx, e->negate ? !r : r);
}

/* ---- filters ----------------------------------------------------------------------- */

static ct_value *select_attr(ct_ctx *ctx, const ct_expr *e, ct_value *self, const ct_args *a,
                             bool keep) {
    ct_value *attr = arg(a, 0, NULL), *test = arg(a, 1, NULL), *targ = arg(a, 2, NULL);
    if (!need_str(ctx, e, attr) || (test && !need_str(ctx, e, test))) return NULL;
    char *tname = test ? ct_strndup(ctx, test->str.s, test->str.len) : NULL;
    if (test && !tname) return NULL;
    size_t n, cap = 0;
    ct_value **items = ct_iterate(ctx, self, &n, e->line);
    ct_value *l = items ? ct_list(ctx, 0) : NULL;
    if (!l) return NULL;
    for (size_t i = 0; i < n; i++) {
        ct_value *v = items[i]->kind == CV_DICT ? ct_dict_get(items[i], attr->str.s, attr->str.len) : NULL;
        if (!v) v = ctx->undef;
        int r = tname ? run_test(ctx, tname, e->line, v, targ) : ct_truthy(v);
        if (r < 0) return NULL;
        if ((r != 0) == keep && !list_push(ctx, l, &cap, items[i])) return NULL;
    }
    return l;
}

ct_value *ct_filter(ct_ctx *ctx, const ct_expr *e, ct_value *self) {
    const char *f = e->name;
    ct_args a;
    ct_value *s;
#define IS(x) (strcmp(f, x) == 0)
    if (IS("default") || IS("d")) {
        if (!eval_args(ctx, e, &a, "default_value,boolean")) return NULL;
        ct_value *dv = arg(&a, 0, "default_value"), *boolean = arg(&a, 1, "boolean");
        bool use = self->kind == CV_UNDEF || (boolean && ct_truthy(boolean) && !ct_truthy(self));
        return use ? (dv ? dv : ctx->empty_str) : self;
    }
    if (IS("safe")) return eval_args(ctx, e, &a, "") ? self : NULL;
    if (IS("trim")) {
        if (!eval_args(ctx, e, &a, "chars") || !(s = ct_to_str(ctx, self))) return NULL;
        ct_value *chars = arg(&a, 0, "chars");
        if (absent(chars)) chars = NULL;
        else if (!need_str(ctx, e, chars)) return NULL;
        return strip(ctx, s, chars, true, true);
    }
    if (IS("upper") || IS("lower") || IS("capitalize") || IS("title")) {
        if (!eval_args(ctx, e, &a, "") || !(s = ct_to_str(ctx, self))) return NULL;
        return map_case(ctx, s, IS("upper") ? CASE_UPPER : IS("lower") ? CASE_LOWER
                                : IS("capitalize") ? CASE_CAPITALIZE : CASE_TITLE_JINJA);
    }
    if (IS("string")) return eval_args(ctx, e, &a, "") ? ct_to_str(ctx, self) : NULL;
    if (IS("length") || IS("count")) {
        if (!eval_args(ctx, e, &a, "")) return NULL;
        switch (self->kind) {
        case CV_STR:
            if (!ct_work(ctx, self->str.len, e->line)) return NULL;
            return ct_int(ctx, (int64_t)ct_utf8_count(self->str.s, self->str.len));
        case CV_LIST: return ct_int(ctx, (int64_t)self->list.n);
        case CV_DICT:
            if (!self->ns) return ct_int(ctx, (int64_t)self->dict.n);
            break;
        case CV_UNDEF: return ct_int(ctx, 0);
        default: break;
        }
        return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "object of type '%s' has no len()",
                       ct_kind_name(self));
    }
    if (IS("tojson")) {
        if (!eval_args(ctx, e, &a, "indent")) return NULL;
        ct_value *indent = arg(&a, 0, "indent");
        if (!absent(indent))
            return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "tojson with an indent");
        ct_sb sb = {0};
        if (!put_json(ctx, &sb, self, 0, e->line)) {
            free(sb.s);
            return NULL;
        }
        return ct_sb_finish(ctx, &sb);
    }
    if (IS("first") || IS("last") || IS("list") || IS("reverse")) {
        if (!eval_args(ctx, e, &a, "")) return NULL;
        size_t n;
        ct_value **items = ct_iterate(ctx, self, &n, e->line);
        if (!items) return NULL;
        if (IS("first")) return n ? items[0] : ctx->undef;
        if (IS("last")) return n ? items[n - 1] : ctx->undef;
        bool rev = IS("reverse");
        if (rev && self->kind == CV_STR) {
            ct_sb sb = {0};
            for (size_t i = n; i-- > 0;)
                if (!ct_sb_put(ctx, &sb, items[i]->str.s, items[i]->str.len)) {
                    free(sb.s);
                    return NULL;
                }
            return ct_sb_finish(ctx, &sb);
        }
        ct_value *l = ct_list(ctx, n);
        if (!l) return NULL;
        for (size_t i = 0; i < n; i++) l->list.items[i] = items[rev ? n - 1 - i : i];
        return l;
    }
    if (IS("join")) {
        if (!eval_args(ctx, e, &a, "d,attribute")) return NULL;
        ct_value *sep = arg(&a, 0, "d"), *attribute = arg(&a, 1, "attribute");
        if (sep && !(sep = ct_to_str(ctx, sep))) return NULL;
        return join(ctx, e, self, sep, attribute);
    }
    if (IS("replace")) {
        if (!eval_args(ctx, e, &a, "old,new,count") || !(s = ct_to_str(ctx, self))) return NULL;
        return replace(ctx, e, s, &a);
    }
    if (IS("items")) {
        if (!eval_args(ctx, e, &a, "")) return NULL;
        if (self->kind == CV_UNDEF) return ct_list(ctx, 0);
        if (self->kind != CV_DICT || self->ns) return type_error(ctx, e, "a dict", self);
        return pairs(ctx, self);
    }
    if (IS("int")) {
        if (!eval_args(ctx, e, &a, "default")) return NULL;
        ct_value *dv = arg(&a, 0, "default");
        if (self->kind == CV_UNDEF) return type_error(ctx, e, "a value", self);
        if (is_num(self)) return ct_int(ctx, num(self));
        if (self->kind == CV_STR) {
            ct_value *t = strip(ctx, self, NULL, true, true);
            if (!t) return NULL;
            size_t i = 0;
            bool neg = false;
            if (i < t->str.len && (t->str.s[i] == '-' || t->str.s[i] == '+')) neg = t->str.s[i++] == '-';
            int64_t x = 0;
            bool ok = i < t->str.len;
            for (; ok && i < t->str.len; i++) {
                char c = t->str.s[i];
                if (c < '0' || c > '9' || x > (INT64_MAX - 9) / 10) ok = false;
                else x = x * 10 + (c - '0');
            }
            if (ok) return ct_int(ctx, neg ? -x : x);
        }
        return dv ? dv : ct_int(ctx, 0);
    }
    if (IS("abs")) {
        if (!eval_args(ctx, e, &a, "")) return NULL;
        if (!is_num(self) || num(self) == INT64_MIN) return type_error(ctx, e, "an integer", self);
        return ct_int(ctx, num(self) < 0 ? -num(self) : num(self));
    }
    if (IS("selectattr") || IS("rejectattr")) {
        if (!eval_args(ctx, e, &a, "attr,test,value")) return NULL;
        return select_attr(ctx, e, self, &a, IS("selectattr"));
    }
    if (IS("map")) {
        if (!eval_args(ctx, e, &a, "attribute,default")) return NULL;
        ct_value *attribute = NULL, *dv = NULL;
        for (size_t i = 0; i < a.n_kw; i++) {
            if (strcmp(a.kw[i], "attribute") == 0) attribute = a.kwv[i];
            else dv = a.kwv[i];
        }
        if (a.n_pos || !attribute || !need_str(ctx, e, attribute))
            return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "map other than map(attribute=...)");
        size_t n;
        ct_value **items = ct_iterate(ctx, self, &n, e->line);
        ct_value *l = items ? ct_list(ctx, n) : NULL;
        if (!l) return NULL;
        for (size_t i = 0; i < n; i++) {
            ct_value *v = items[i]->kind == CV_DICT ? ct_dict_get(items[i], attribute->str.s, attribute->str.len) : NULL;
            l->list.items[i] = v ? v : dv ? dv : ctx->undef;
        }
        return l;
    }
#undef IS
    return ct_fail(ctx, TDM_ERR_UNSUPPORTED, e->line, "the filter '%s'", f);
}

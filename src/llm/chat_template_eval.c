/* Chat templates: values, expressions and statements (see chat_template_impl.h), and
 * tdm_chat_render. Values behave as Python's do under Jinja: `+` adds ints and joins
 * strings and lists, `~` joins the str() of both sides, `and`/`or` give an operand, a
 * missing name, key or index is undefined (prints "", is false, iterates as empty) and using
 * an undefined value further (attribute, subscript, arithmetic) is an error. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/chat_template_impl.h"
#include "tandem/tokenizer.h"

/* ---- arena and errors -------------------------------------------------------------- */

struct ct_chunk {
    ct_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define CT_CHUNK ((size_t)64 << 10)

void *ct_alloc(ct_ctx *ctx, size_t size) {
    if (ctx->err) return NULL;
    size = (size + 15) & ~(size_t)15;
    if (size == 0 || size > CT_MAX_ARENA - ctx->arena_used) {
        ct_fail(ctx, TDM_ERR_LIMIT, 0,
                "chat template: the render needs more than %zu MiB of memory (a runaway template?)",
                CT_MAX_ARENA >> 20);
        return NULL;
    }
    ct_chunk *c = ctx->chunks;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > CT_CHUNK / 4 ? size : CT_CHUNK;
        ct_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) {
            ct_fail(ctx, TDM_ERR_OUT_OF_MEMORY, 0, "chat template: out of memory");
            return NULL;
        }
        nc->used = 0;
        nc->cap = cap;
        if (c && cap == size) { /* a big block: keep the current chunk's free space */
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            ctx->chunks = nc;
        }
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += size;
    ctx->arena_used += size;
    return p;
}

void ct_ctx_free(ct_ctx *ctx) {
    for (ct_chunk *c = ctx->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    ctx->chunks = NULL;
    free(ctx->out.s);
    ctx->out = (ct_sb){0};
}

void *ct_fail(ct_ctx *ctx, tdm_code code, int line, const char *fmt, ...) {
    if (ctx->err) return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof msg) { /* cut: end at a code point, and say so */
        size_t len = sizeof msg - 4;
        while (len && ((unsigned char)msg[len] & 0xC0) == 0x80) len--;
        memcpy(msg + len, "...", 4);
    }
    if (line > 0) ctx->err = tdm_status_new(code, "chat template line %d: %s", line, msg);
    else ctx->err = tdm_status_new(code, "%s", msg);
    return NULL;
}

char *ct_strndup(ct_ctx *ctx, const char *s, size_t n) {
    char *d = ct_alloc(ctx, n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

bool ct_work(ct_ctx *ctx, size_t units, int line) {
    if (ctx->err) return false;
    if (units > CT_MAX_WORK - ctx->work) {
        ct_fail(ctx, TDM_ERR_LIMIT, line,
                "the render passes its work budget (%zu Mi units: bytes scanned or copied; a "
                "runaway template?)", CT_MAX_WORK >> 20);
        return false;
    }
    ctx->work += units;
    return true;
}

const char *ct_search(ct_ctx *ctx, const char *h, size_t hl, const char *n, size_t nl, int line) {
    if (nl == 0) return h;
    size_t i = 0, units = 0;
    const char *hit = NULL;
    while (i + nl <= hl) {
        const char *p = memchr(h + i, n[0], hl - nl + 1 - i);
        if (!p) {
            units += hl - i;
            break;
        }
        size_t j = (size_t)(p - h);
        units += j - i + nl;
        if (memcmp(p, n, nl) == 0) {
            hit = p;
            break;
        }
        i = j + 1;
        if (units > ((size_t)1 << 20)) { /* charge as it goes: a pathological needle */
            if (!ct_work(ctx, units, line)) return NULL;
            units = 0;
        }
    }
    return ct_work(ctx, units, line) ? hit : NULL;
}

bool ct_sb_put(ct_ctx *ctx, ct_sb *sb, const char *s, size_t n) {
    if (!ct_work(ctx, n + CT_WORK_CALL, 0)) return false;
    if (n > CT_MAX_OUTPUT - sb->len) {
        ct_fail(ctx, TDM_ERR_LIMIT, 0,
                "chat template: a string or the output passes %zu MiB (a runaway template?)",
                CT_MAX_OUTPUT >> 20);
        return false;
    }
    if (sb->len + n + 1 > sb->cap) {
        size_t ncap = sb->cap ? sb->cap : 256;
        while (ncap < sb->len + n + 1) ncap *= 2;
        char *ns = realloc(sb->s, ncap);
        if (!ns) {
            ct_fail(ctx, TDM_ERR_OUT_OF_MEMORY, 0, "chat template: out of memory");
            return false;
        }
        sb->s = ns;
        sb->cap = ncap;
    }
    if (n) memcpy(sb->s + sb->len, s, n);
    sb->len += n;
    sb->s[sb->len] = 0;
    return true;
}

static bool sb_puts(ct_ctx *ctx, ct_sb *sb, const char *s) { return ct_sb_put(ctx, sb, s, strlen(s)); }

ct_value *ct_sb_finish(ct_ctx *ctx, ct_sb *sb) {
    ct_value *v = ctx->err ? NULL : ct_str(ctx, sb->s ? sb->s : "", sb->len);
    free(sb->s);
    *sb = (ct_sb){0};
    return v;
}

/* ---- values ------------------------------------------------------------------------ */

static ct_value *new_value(ct_ctx *ctx, ct_kind kind) {
    ct_value *v = ct_alloc(ctx, sizeof *v);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->kind = kind;
    return v;
}

ct_value *ct_str_own(ct_ctx *ctx, const char *s, size_t len) {
    ct_value *v = new_value(ctx, CV_STR);
    if (!v) return NULL;
    v->str.s = s;
    v->str.len = len;
    return v;
}

ct_value *ct_str(ct_ctx *ctx, const char *s, size_t len) {
    if (len == 0 && ctx->empty_str) return ctx->empty_str;
    char *d = ct_strndup(ctx, s, len);
    return d ? ct_str_own(ctx, d, len) : NULL;
}

ct_value *ct_int(ct_ctx *ctx, int64_t i) {
    ct_value *v = new_value(ctx, CV_INT);
    if (v) v->i = i;
    return v;
}

ct_value *ct_bool(ct_ctx *ctx, bool b) { return b ? ctx->vtrue : ctx->vfalse; }

ct_value *ct_list(ct_ctx *ctx, size_t n) {
    ct_value *v = new_value(ctx, CV_LIST);
    if (!v) return NULL;
    if (n) {
        if (n > CT_MAX_ARENA / sizeof(ct_value *)) {
            ct_fail(ctx, TDM_ERR_LIMIT, 0, "chat template: a list of %zu items", n);
            return NULL;
        }
        v->list.items = ct_alloc(ctx, n * sizeof *v->list.items);
        if (!v->list.items) return NULL;
        memset(v->list.items, 0, n * sizeof *v->list.items);
    }
    v->list.n = n;
    return v;
}

ct_value *ct_dict(ct_ctx *ctx) { return new_value(ctx, CV_DICT); }

static bool is_hashable(const ct_value *k) {
    return k->kind == CV_STR || k->kind == CV_INT || k->kind == CV_BOOL || k->kind == CV_NONE;
}

bool ct_dict_set(ct_ctx *ctx, ct_value *d, ct_value *key, ct_value *val) {
    if (!is_hashable(key)) {
        ct_fail(ctx, TDM_ERR_UNSUPPORTED, 0, "chat template: a dict key of type %s",
                ct_kind_name(key));
        return false;
    }
    for (size_t i = 0; i < d->dict.n; i++) {
        if (ct_equal(d->dict.keys[i], key)) {
            d->dict.vals[i] = val;
            return true;
        }
    }
    if (d->dict.n == d->dict.cap) {
        size_t ncap = d->dict.cap ? d->dict.cap * 2 : 4;
        ct_value **nk = ct_alloc(ctx, ncap * sizeof *nk), **nv = ct_alloc(ctx, ncap * sizeof *nv);
        if (!nk || !nv) return false;
        if (d->dict.n) {
            memcpy(nk, d->dict.keys, d->dict.n * sizeof *nk);
            memcpy(nv, d->dict.vals, d->dict.n * sizeof *nv);
        }
        d->dict.keys = nk;
        d->dict.vals = nv;
        d->dict.cap = ncap;
    }
    d->dict.keys[d->dict.n] = key;
    d->dict.vals[d->dict.n] = val;
    d->dict.n++;
    return true;
}

ct_value *ct_dict_get(const ct_value *d, const char *key, size_t len) {
    for (size_t i = 0; i < d->dict.n; i++) {
        const ct_value *k = d->dict.keys[i];
        if (k->kind == CV_STR && k->str.len == len && memcmp(k->str.s, key, len) == 0)
            return d->dict.vals[i];
    }
    return NULL;
}

bool ct_truthy(const ct_value *v) {
    switch (v->kind) {
    case CV_UNDEF:
    case CV_NONE: return false;
    case CV_BOOL: return v->b;
    case CV_INT: return v->i != 0;
    case CV_STR: return v->str.len != 0;
    case CV_LIST: return v->list.n != 0;
    case CV_DICT: return v->ns || v->dict.n != 0;
    case CV_LOOP:
    case CV_FUNC: return true;
    }
    return false;
}

const char *ct_kind_name(const ct_value *v) {
    switch (v->kind) {
    case CV_UNDEF: return "undefined";
    case CV_NONE: return "NoneType";
    case CV_BOOL: return "bool";
    case CV_INT: return "int";
    case CV_STR: return "str";
    case CV_LIST: return "list";
    case CV_DICT: return v->ns ? "Namespace" : "dict";
    case CV_LOOP: return "LoopContext";
    case CV_FUNC: return "function";
    }
    return "?";
}

static bool is_number(const ct_value *v) { return v->kind == CV_INT || v->kind == CV_BOOL; }
static int64_t num(const ct_value *v) { return v->kind == CV_BOOL ? (int64_t)v->b : v->i; }

static bool equal_depth(const ct_value *a, const ct_value *b, int depth) {
    if (depth > CT_MAX_DEPTH) return false;
    if (is_number(a) && is_number(b)) return num(a) == num(b);
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case CV_UNDEF:
    case CV_NONE: return true;
    case CV_STR: return a->str.len == b->str.len && memcmp(a->str.s, b->str.s, a->str.len) == 0;
    case CV_LIST:
        if (a->list.n != b->list.n) return false;
        for (size_t i = 0; i < a->list.n; i++)
            if (!equal_depth(a->list.items[i], b->list.items[i], depth + 1)) return false;
        return true;
    case CV_DICT:
        if (a->ns || b->ns) return a == b;
        if (a->dict.n != b->dict.n) return false;
        for (size_t i = 0; i < a->dict.n; i++) {
            bool found = false;
            for (size_t j = 0; j < b->dict.n && !found; j++) {
                if (equal_depth(a->dict.keys[i], b->dict.keys[j], depth + 1)) {
                    if (!equal_depth(a->dict.vals[i], b->dict.vals[j], depth + 1)) return false;
                    found = true;
                }
            }
            if (!found) return false;
        }
        return true;
    default: return a == b;
    }
}

bool ct_equal(const ct_value *a, const ct_value *b) { return equal_depth(a, b, 0); }

int ct_order(ct_ctx *ctx, const ct_value *a, const ct_value *b, const char *op, int line) {
    if (is_number(a) && is_number(b)) return num(a) < num(b) ? -1 : num(a) > num(b);
    if (a->kind == CV_LIST && b->kind == CV_LIST && a->tuple == b->tuple) {
        /* lexicographic: the first unequal items decide, else the lengths */
        if (!ct_work(ctx, a->list.n, line)) return 2;
        for (size_t i = 0; i < a->list.n && i < b->list.n; i++) {
            if (ct_equal(a->list.items[i], b->list.items[i])) continue;
            if (ctx->depth >= CT_MAX_EVAL_DEPTH) {
                ct_fail(ctx, TDM_ERR_LIMIT, line, "comparison of values nested too deeply");
                return 2;
            }
            ctx->depth++;
            int c = ct_order(ctx, a->list.items[i], b->list.items[i], op, line);
            ctx->depth--;
            return c;
        }
        return a->list.n < b->list.n ? -1 : a->list.n > b->list.n;
    }
    if (a->kind == CV_STR && b->kind == CV_STR) {
        size_t n = a->str.len < b->str.len ? a->str.len : b->str.len;
        int c = memcmp(a->str.s, b->str.s, n); /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return a->str.len < b->str.len ? -1 : a->str.len > b->str.len;
    }
    if (a->kind == CV_UNDEF || b->kind == CV_UNDEF) {
        const ct_value *u = a->kind == CV_UNDEF ? a : b;
        ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "'%s' is undefined",
                u->undef_name ? u->undef_name : "value");
        return 2;
    }
    ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line,
            "'%s' not supported between instances of '%s' and '%s'", op, ct_kind_name(a),
            ct_kind_name(b));
    return 2;
}

/* Python's repr of a str: single quotes unless the text holds ' and no ". */
static bool put_str_repr(ct_ctx *ctx, ct_sb *sb, const char *s, size_t len) {
    char q = memchr(s, '\'', len) && !memchr(s, '"', len) ? '"' : '\'';
    if (!ct_sb_put(ctx, sb, &q, 1)) return false;
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        const char *e = NULL;
        size_t n = 1;
        uint32_t cp = c;
        if (c >= 0x80) {
            n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            cp = c & (0x3F >> (n - 1));
            for (size_t k = 1; k < n; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
        }
        if (cp == (uint32_t)q || cp == '\\') {
            snprintf(esc, sizeof esc, "\\%c", (char)cp);
            e = esc;
        } else if (cp == '\n') {
            e = "\\n";
        } else if (cp == '\r') {
            e = "\\r";
        } else if (cp == '\t') {
            e = "\\t";
        } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned)cp);
            e = esc;
        } else if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
                   (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) ||
                   cp == 0x3000 || cp == 0xFEFF) {
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            e = esc;
        }
        if (e ? !sb_puts(ctx, sb, e) : !ct_sb_put(ctx, sb, s + i, n)) return false;
        i += n;
    }
    return ct_sb_put(ctx, sb, &q, 1);
}

static bool put_str(ct_ctx *ctx, ct_sb *sb, const ct_value *v, int depth, bool repr) {
    char buf[32];
    if (depth > CT_MAX_DEPTH) {
        ct_fail(ctx, TDM_ERR_LIMIT, 0, "chat template: a value nested deeper than %d levels",
                CT_MAX_DEPTH);
        return false;
    }
    switch (v->kind) {
    case CV_UNDEF: return repr ? sb_puts(ctx, sb, "Undefined") : true;
    case CV_NONE: return sb_puts(ctx, sb, "None");
    case CV_BOOL: return sb_puts(ctx, sb, v->b ? "True" : "False");
    case CV_INT:
        snprintf(buf, sizeof buf, "%" PRId64, v->i);
        return sb_puts(ctx, sb, buf);
    case CV_STR:
        return repr ? put_str_repr(ctx, sb, v->str.s, v->str.len)
                    : ct_sb_put(ctx, sb, v->str.s, v->str.len);
    case CV_LIST:
        if (!sb_puts(ctx, sb, v->tuple ? "(" : "[")) return false;
        for (size_t i = 0; i < v->list.n; i++)
            if ((i && !sb_puts(ctx, sb, ", ")) || !put_str(ctx, sb, v->list.items[i], depth + 1, true))
                return false;
        if (v->tuple && v->list.n == 1 && !sb_puts(ctx, sb, ",")) return false;
        return sb_puts(ctx, sb, v->tuple ? ")" : "]");
    case CV_DICT:
        if (!sb_puts(ctx, sb, v->ns ? "<Namespace {" : "{")) return false;
        for (size_t i = 0; i < v->dict.n; i++)
            if ((i && !sb_puts(ctx, sb, ", ")) || !put_str(ctx, sb, v->dict.keys[i], depth + 1, true) ||
                !sb_puts(ctx, sb, ": ") || !put_str(ctx, sb, v->dict.vals[i], depth + 1, true))
                return false;
        return sb_puts(ctx, sb, v->ns ? "}>" : "}");
    case CV_LOOP:
        snprintf(buf, sizeof buf, "<LoopContext %zu/%zu>", v->loop->pos + 1, v->loop->n);
        return sb_puts(ctx, sb, buf);
    case CV_FUNC:
        return sb_puts(ctx, sb, "<function ") && sb_puts(ctx, sb, v->undef_name) &&
               sb_puts(ctx, sb, ">");
    }
    return false;
}

bool ct_put_repr(ct_ctx *ctx, ct_sb *sb, const ct_value *v, int depth) {
    return put_str(ctx, sb, v, depth, true);
}

ct_value *ct_to_str(ct_ctx *ctx, const ct_value *v) {
    if (v->kind == CV_STR) return (ct_value *)v;
    if (v->kind == CV_UNDEF) return ctx->empty_str;
    ct_sb sb = {0};
    if (!put_str(ctx, &sb, v, 0, false)) {
        free(sb.s);
        return NULL;
    }
    return ct_sb_finish(ctx, &sb);
}

static void *undefined_error(ct_ctx *ctx, const ct_value *u, int line) {
    return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "'%s' is undefined",
                   u->undef_name ? u->undef_name : "value");
}

ct_value **ct_iterate(ct_ctx *ctx, ct_value *v, size_t *n, int line) {
    static ct_value *none[1];
    if (!ct_work(ctx, v->kind == CV_STR ? v->str.len : v->kind == CV_LIST ? v->list.n : 1, line))
        return NULL;
    switch (v->kind) {
    case CV_UNDEF: *n = 0; return none;
    case CV_LIST: *n = v->list.n; return v->list.n ? v->list.items : none;
    case CV_DICT:
        if (v->ns) break;
        *n = v->dict.n;
        return v->dict.n ? v->dict.keys : none;
    case CV_STR: {
        size_t count = ct_utf8_count(v->str.s, v->str.len);
        ct_value *l = ct_list(ctx, count);
        if (!l) return NULL;
        size_t off = 0;
        for (size_t i = 0; i < count; i++) {
            size_t next = ct_utf8_offset(v->str.s + off, v->str.len - off, 1) + off;
            if (!(l->list.items[i] = ct_str(ctx, v->str.s + off, next - off))) return NULL;
            off = next;
        }
        *n = count;
        return count ? l->list.items : none;
    }
    default: break;
    }
    return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "'%s' object is not iterable",
                   ct_kind_name(v));
}

int ct_contains(ct_ctx *ctx, const ct_value *hay, const ct_value *needle, int line) {
    size_t size = hay->kind == CV_LIST ? hay->list.n : hay->kind == CV_DICT ? hay->dict.n : 1;
    if (!ct_work(ctx, size, line)) return -1;
    switch (hay->kind) {
    case CV_STR:
        if (needle->kind != CV_STR) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line,
                    "'in <string>' requires string as left operand, not %s", ct_kind_name(needle));
            return -1;
        }
        if (ct_search(ctx, hay->str.s, hay->str.len, needle->str.s, needle->str.len, line)) return 1;
        return ctx->err ? -1 : 0;
    case CV_LIST:
        for (size_t i = 0; i < hay->list.n; i++)
            if (ct_equal(hay->list.items[i], needle)) return 1;
        return 0;
    case CV_DICT:
        if (hay->ns) break;
        if (needle->kind == CV_UNDEF) return 0; /* Undefined hashes, and is no key */
        if (!is_hashable(needle)) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "unhashable type: '%s'", ct_kind_name(needle));
            return -1;
        }
        for (size_t i = 0; i < hay->dict.n; i++)
            if (ct_equal(hay->dict.keys[i], needle)) return 1;
        return 0;
    case CV_UNDEF: return 0;
    default: break;
    }
    ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "argument of type '%s' is not iterable",
            ct_kind_name(hay));
    return -1;
}

/* ---- scopes ------------------------------------------------------------------------ */

bool ct_scope_set(ct_ctx *ctx, ct_scope *sc, const char *name, ct_value *val) {
    for (size_t i = 0; i < sc->n; i++) {
        if (strcmp(sc->names[i], name) == 0) {
            sc->vals[i] = val;
            return true;
        }
    }
    if (sc->n == sc->cap) {
        size_t ncap = sc->cap ? sc->cap * 2 : 8;
        const char **nn = ct_alloc(ctx, ncap * sizeof *nn);
        ct_value **nv = ct_alloc(ctx, ncap * sizeof *nv);
        if (!nn || !nv) return false;
        if (sc->n) {
            memcpy(nn, sc->names, sc->n * sizeof *nn);
            memcpy(nv, sc->vals, sc->n * sizeof *nv);
        }
        sc->names = nn;
        sc->vals = nv;
        sc->cap = ncap;
    }
    sc->names[sc->n] = name;
    sc->vals[sc->n] = val;
    sc->n++;
    return true;
}

static ct_value *lookup(ct_ctx *ctx, const char *name) {
    for (ct_scope *sc = ctx->scope; sc; sc = sc->parent)
        for (size_t i = 0; i < sc->n; i++)
            if (strcmp(sc->names[i], name) == 0) return sc->vals[i];
    return NULL;
}

/* ---- expressions ------------------------------------------------------------------- */

static ct_value *undef_named(ct_ctx *ctx, const char *name) {
    ct_value *u = new_value(ctx, CV_UNDEF);
    if (u) u->undef_name = name;
    return u;
}

static ct_value *loop_attr(ct_ctx *ctx, const ct_loop *l, const char *name, size_t len) {
#define IS(s) (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)
    if (IS("index")) return ct_int(ctx, (int64_t)l->pos + 1);
    if (IS("index0")) return ct_int(ctx, (int64_t)l->pos);
    if (IS("revindex")) return ct_int(ctx, (int64_t)(l->n - l->pos));
    if (IS("revindex0")) return ct_int(ctx, (int64_t)(l->n - l->pos - 1));
    if (IS("first")) return ct_bool(ctx, l->pos == 0);
    if (IS("last")) return ct_bool(ctx, l->pos + 1 == l->n);
    if (IS("length")) return ct_int(ctx, (int64_t)l->n);
    if (IS("depth")) return ct_int(ctx, 1);
    if (IS("depth0")) return ct_int(ctx, 0);
    if (IS("previtem")) return l->pos ? l->items[l->pos - 1] : ctx->undef;
    if (IS("nextitem")) return l->pos + 1 < l->n ? l->items[l->pos + 1] : ctx->undef;
#undef IS
    return ctx->undef;
}

static bool get_index(ct_ctx *ctx, const ct_value *k, size_t n, size_t *out) {
    (void)ctx;
    int64_t i = num(k);
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

ct_value *ct_getitem(ct_ctx *ctx, ct_value *obj, ct_value *key, int line) {
    size_t idx;
    if (!ct_work(ctx, obj->kind == CV_STR ? obj->str.len : obj->kind == CV_DICT ? obj->dict.n : 1, line))
        return NULL;
    switch (obj->kind) {
    case CV_UNDEF: return undefined_error(ctx, obj, line);
    case CV_DICT:
        for (size_t i = 0; i < obj->dict.n; i++)
            if (ct_equal(obj->dict.keys[i], key)) return obj->dict.vals[i];
        break;
    case CV_LIST:
        if (is_number(key) && get_index(ctx, key, obj->list.n, &idx)) return obj->list.items[idx];
        break;
    case CV_STR:
        if (is_number(key)) {
            size_t count = ct_utf8_count(obj->str.s, obj->str.len);
            if (!get_index(ctx, key, count, &idx)) break;
            size_t a = ct_utf8_offset(obj->str.s, obj->str.len, idx);
            size_t b = ct_utf8_offset(obj->str.s + a, obj->str.len - a, 1) + a;
            return ct_str(ctx, obj->str.s + a, b - a);
        }
        break;
    case CV_LOOP:
        if (key->kind == CV_STR) return loop_attr(ctx, obj->loop, key->str.s, key->str.len);
        break;
    default: break;
    }
    if (key->kind == CV_STR) return undef_named(ctx, ct_strndup(ctx, key->str.s, key->str.len));
    return ctx->undef;
}

static ct_value *getattr(ct_ctx *ctx, ct_value *obj, const char *name, int line) {
    if (obj->kind == CV_UNDEF) return undefined_error(ctx, obj, line);
    if (obj->kind == CV_LOOP) return loop_attr(ctx, obj->loop, name, strlen(name));
    if (obj->kind == CV_DICT) {
        ct_value *v = ct_dict_get(obj, name, strlen(name));
        if (v) return v;
    }
    return undef_named(ctx, name);
}

/* Python's slice indices for a sequence of n items. */
static bool slice_bound(ct_ctx *ctx, ct_value *v, int64_t n, int64_t step, bool lower,
                        int64_t *out, int line) {
    if (!v || v->kind == CV_NONE || v->kind == CV_UNDEF) {
        *out = step < 0 ? (lower ? n - 1 : -1) : (lower ? 0 : n);
        return true;
    }
    if (!is_number(v)) {
        ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "slice indices must be integers or None");
        return false;
    }
    int64_t i = num(v);
    if (i < 0) {
        i += n;
        if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
        i = step < 0 ? n - 1 : n;
    }
    *out = i;
    return true;
}

static ct_value *slice(ct_ctx *ctx, const ct_expr *e, ct_value *obj) {
    ct_value *vb = e->b ? ct_eval(ctx, e->b) : NULL, *vc = e->c ? ct_eval(ctx, e->c) : NULL;
    ct_value *vd = e->d ? ct_eval(ctx, e->d) : NULL;
    if (ctx->err) return NULL;
    int64_t step = 1;
    if (vd && vd->kind != CV_NONE && vd->kind != CV_UNDEF) {
        if (!is_number(vd) || num(vd) == 0)
            return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line,
                           "slice step must be a non-zero integer");
        step = num(vd);
    }
    if (obj->kind == CV_UNDEF) return undefined_error(ctx, obj, e->line);
    if (obj->kind != CV_LIST && obj->kind != CV_STR) /* Jinja slices with Python's [] */
        return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "'%s' object is not subscriptable",
                       ct_kind_name(obj));
    size_t n_items;
    ct_value **items = ct_iterate(ctx, obj, &n_items, e->line);
    if (!items) return NULL;
    int64_t n = (int64_t)n_items, start, stop;
    if (!slice_bound(ctx, vb, n, step, true, &start, e->line) ||
        !slice_bound(ctx, vc, n, step, false, &stop, e->line))
        return NULL;
    size_t count = 0;
    if (step > 0 && start < stop) count = (size_t)((stop - start - 1) / step + 1);
    if (step < 0 && start > stop) count = (size_t)((start - stop - 1) / (-step) + 1);
    if (obj->kind == CV_STR) {
        ct_sb sb = {0};
        for (size_t k = 0; k < count; k++) {
            const ct_value *c = items[start + (int64_t)k * step];
            if (!ct_sb_put(ctx, &sb, c->str.s, c->str.len)) {
                free(sb.s);
                return NULL;
            }
        }
        return ct_sb_finish(ctx, &sb);
    }
    ct_value *l = ct_list(ctx, count);
    if (!l) return NULL;
    for (size_t k = 0; k < count; k++) l->list.items[k] = items[start + (int64_t)k * step];
    return l;
}

static ct_value *overflow(ct_ctx *ctx, int line) {
    return ct_fail(ctx, TDM_ERR_UNSUPPORTED, line, "integer arithmetic beyond 64 bits");
}

static ct_value *repeat(ct_ctx *ctx, ct_value *seq, int64_t times, int line) {
    if (times < 0) times = 0;
    if (seq->kind == CV_STR) {
        if (seq->str.len && (uint64_t)times > CT_MAX_OUTPUT / seq->str.len)
            return ct_fail(ctx, TDM_ERR_LIMIT, line, "string repetition passes %zu MiB",
                           CT_MAX_OUTPUT >> 20);
        size_t total = seq->str.len * (size_t)times;
        if (!ct_work(ctx, total, line)) return NULL;
        char *d = ct_alloc(ctx, total + 1);
        if (!d) return NULL;
        for (size_t o = 0; o < total; o += seq->str.len) memcpy(d + o, seq->str.s, seq->str.len);
        d[total] = 0;
        return ct_str_own(ctx, d, total);
    }
    if (seq->list.n && (uint64_t)times > CT_MAX_ITERATIONS / seq->list.n)
        return ct_fail(ctx, TDM_ERR_LIMIT, line, "list repetition past %d items",
                       CT_MAX_ITERATIONS);
    ct_value *l = ct_list(ctx, seq->list.n * (size_t)times);
    if (!l) return NULL;
    for (size_t k = 0; k < l->list.n; k++) l->list.items[k] = seq->list.items[k % seq->list.n];
    return l;
}

/* a + b of two strings, in the arena */
static ct_value *concat(ct_ctx *ctx, const ct_value *a, const ct_value *b, int line) {
    if (a->str.len + b->str.len > CT_MAX_OUTPUT)
        return ct_fail(ctx, TDM_ERR_LIMIT, line, "a string passes %zu MiB (a runaway template?)",
                       CT_MAX_OUTPUT >> 20);
    if (!b->str.len) return (ct_value *)a;
    if (!a->str.len) return (ct_value *)b;
    size_t n = a->str.len + b->str.len;
    char *d = ct_work(ctx, n + CT_WORK_CALL, line) ? ct_alloc(ctx, n + 1) : NULL;
    if (!d) return NULL;
    memcpy(d, a->str.s, a->str.len);
    memcpy(d + a->str.len, b->str.s, b->str.len);
    d[n] = 0;
    return ct_str_own(ctx, d, n);
}

static ct_value *binop(ct_ctx *ctx, const ct_expr *e, ct_value *a, ct_value *b) {
    const char *op = e->name;
    int line = e->line;
    if (op[0] == '~') {
        ct_value *sa = ct_to_str(ctx, a), *sb2 = sa ? ct_to_str(ctx, b) : NULL;
        return sb2 ? concat(ctx, sa, sb2, line) : NULL;
    }
    if (a->kind == CV_UNDEF) return undefined_error(ctx, a, line);
    if (b->kind == CV_UNDEF) return undefined_error(ctx, b, line);
    if (is_number(a) && is_number(b)) {
        int64_t x = num(a), y = num(b), r;
        switch (op[0]) {
        case '+':
            if (__builtin_add_overflow(x, y, &r)) return overflow(ctx, line);
            return ct_int(ctx, r);
        case '-':
            if (__builtin_sub_overflow(x, y, &r)) return overflow(ctx, line);
            return ct_int(ctx, r);
        case '*':
            if (__builtin_mul_overflow(x, y, &r)) return overflow(ctx, line);
            return ct_int(ctx, r);
        case '/':
            if (op[1] != '/')
                return ct_fail(ctx, TDM_ERR_UNSUPPORTED, line, "'/' (true division gives a float)");
            /* fallthrough */
        case '%':
            if (y == 0)
                return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return overflow(ctx, line);
            r = op[0] == '%' ? x % y : x / y;
            if (op[0] == '%') {
                if (r != 0 && ((r < 0) != (y < 0))) r += y; /* Python's sign of the divisor */
            } else if ((x % y != 0) && ((x < 0) != (y < 0))) {
                r -= 1; /* floor */
            }
            return ct_int(ctx, r);
        default: break;
        }
    }
    if (op[0] == '+' && a->kind == CV_STR && b->kind == CV_STR) return concat(ctx, a, b, line);
    if (op[0] == '+' && a->kind == CV_LIST && b->kind == CV_LIST && a->tuple == b->tuple) {
        ct_value *l = ct_list(ctx, a->list.n + b->list.n);
        if (!l) return NULL;
        l->tuple = a->tuple;
        if (a->list.n) memcpy(l->list.items, a->list.items, a->list.n * sizeof *l->list.items);
        if (b->list.n)
            memcpy(l->list.items + a->list.n, b->list.items, b->list.n * sizeof *l->list.items);
        return l;
    }
    if (op[0] == '*' && (a->kind == CV_STR || a->kind == CV_LIST) && is_number(b))
        return repeat(ctx, a, num(b), line);
    if (op[0] == '*' && (b->kind == CV_STR || b->kind == CV_LIST) && is_number(a))
        return repeat(ctx, b, num(a), line);
    if (op[0] == '%' && a->kind == CV_STR)
        return ct_fail(ctx, TDM_ERR_UNSUPPORTED, line, "'%%' string formatting");
    return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line,
                   "unsupported operand type(s) for %s: '%s' and '%s'", op, ct_kind_name(a),
                   ct_kind_name(b));
}

static ct_value *compare(ct_ctx *ctx, const ct_expr *e, ct_value *a, ct_value *b) {
    const char *op = e->name;
    if (!ct_work(ctx, a->kind == CV_STR ? a->str.len : a->kind == CV_LIST ? a->list.n : 1, e->line))
        return NULL;
    if (strcmp(op, "==") == 0) return ct_bool(ctx, ct_equal(a, b));
    if (strcmp(op, "!=") == 0) return ct_bool(ctx, !ct_equal(a, b));
    if (strcmp(op, "in") == 0 || strcmp(op, "not in") == 0) {
        int c = ct_contains(ctx, b, a, e->line);
        if (c < 0) return NULL;
        return ct_bool(ctx, op[0] == 'i' ? c : !c);
    }
    int c = ct_order(ctx, a, b, op, e->line);
    if (c == 2) return NULL;
    if (strcmp(op, "<") == 0) return ct_bool(ctx, c < 0);
    if (strcmp(op, ">") == 0) return ct_bool(ctx, c > 0);
    if (strcmp(op, "<=") == 0) return ct_bool(ctx, c <= 0);
    return ct_bool(ctx, c >= 0);
}

static ct_value *eval(ct_ctx *ctx, const ct_expr *e);

ct_value *ct_eval(ct_ctx *ctx, const ct_expr *e) {
    if (!ct_work(ctx, CT_WORK_CALL, e->line)) return NULL;
    if (ctx->depth >= CT_MAX_EVAL_DEPTH)
        return ct_fail(ctx, TDM_ERR_LIMIT, e->line, "expression nested deeper than %d levels",
                       CT_MAX_EVAL_DEPTH);
    ctx->depth++;
    ct_value *v = eval(ctx, e);
    ctx->depth--;
    return v;
}

static ct_value *eval(ct_ctx *ctx, const ct_expr *e) {
    ct_value *a, *b;
    switch (e->kind) {
    case CE_LIT: return e->lit;
    case CE_NAME: {
        ct_value *v = lookup(ctx, e->name);
        if (!v && ct_is_function(e->name)) {
            if ((v = new_value(ctx, CV_FUNC))) v->undef_name = e->name;
            return v;
        }
        return v ? v : undef_named(ctx, e->name);
    }
    case CE_LIST: {
        ct_value *l = ct_list(ctx, e->n);
        if (!l) return NULL;
        l->tuple = e->negate; /* the parser marks tuples so */
        for (size_t i = 0; i < e->n; i++)
            if (!(l->list.items[i] = ct_eval(ctx, e->args[i]))) return NULL;
        return l;
    }
    case CE_DICT: {
        ct_value *d = ct_dict(ctx);
        if (!d) return NULL;
        for (size_t i = 0; i + 1 < e->n; i += 2) {
            ct_value *k = ct_eval(ctx, e->args[i]), *v = k ? ct_eval(ctx, e->args[i + 1]) : NULL;
            if (!v || !ct_dict_set(ctx, d, k, v)) return NULL;
        }
        return d;
    }
    case CE_ATTR:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return getattr(ctx, a, e->name, e->line);
    case CE_ITEM:
        if (!(a = ct_eval(ctx, e->a)) || !(b = ct_eval(ctx, e->b))) return NULL;
        return ct_getitem(ctx, a, b, e->line);
    case CE_SLICE:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return slice(ctx, e, a);
    case CE_CALL: return ct_call(ctx, e);
    case CE_METHOD:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return ct_method(ctx, e, a);
    case CE_FILTER:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return ct_filter(ctx, e, a);
    case CE_TEST:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return ct_test(ctx, e, a);
    case CE_NEG:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        if (a->kind == CV_UNDEF) return undefined_error(ctx, a, e->line);
        if (!is_number(a))
            return ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, e->line, "bad operand type for unary -: '%s'",
                           ct_kind_name(a));
        if (num(a) == INT64_MIN) return overflow(ctx, e->line);
        return ct_int(ctx, -num(a));
    case CE_NOT:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return ct_bool(ctx, !ct_truthy(a));
    case CE_AND:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return ct_truthy(a) ? ct_eval(ctx, e->b) : a;
    case CE_OR:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        return ct_truthy(a) ? a : ct_eval(ctx, e->b);
    case CE_BIN:
        if (!(a = ct_eval(ctx, e->a)) || !(b = ct_eval(ctx, e->b))) return NULL;
        return binop(ctx, e, a, b);
    case CE_CMP:
        if (!(a = ct_eval(ctx, e->a)) || !(b = ct_eval(ctx, e->b))) return NULL;
        return compare(ctx, e, a, b);
    case CE_COND:
        if (!(a = ct_eval(ctx, e->a))) return NULL;
        if (ct_truthy(a)) return ct_eval(ctx, e->b);
        return e->c ? ct_eval(ctx, e->c) : ctx->undef;
    }
    return ct_fail(ctx, TDM_ERR_INTERNAL, e->line, "unknown expression kind %d", (int)e->kind);
}

/* ---- statements -------------------------------------------------------------------- */

static bool bind_targets(ct_ctx *ctx, const ct_node *n, ct_scope *sc, ct_value *item) {
    if (n->n_targets == 1) return ct_scope_set(ctx, sc, n->targets[0], item);
    size_t count;
    ct_value **parts = item->kind == CV_LIST ? item->list.items : NULL;
    count = item->kind == CV_LIST ? item->list.n : 0;
    if (!parts || count != n->n_targets) {
        ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, n->line,
                "cannot unpack a %s into %zu loop variables", ct_kind_name(item), n->n_targets);
        return false;
    }
    for (size_t i = 0; i < count; i++)
        if (!ct_scope_set(ctx, sc, n->targets[i], parts[i])) return false;
    return true;
}

static bool count_iteration(ct_ctx *ctx, int line) {
    if (++ctx->iterations > CT_MAX_ITERATIONS) {
        ct_fail(ctx, TDM_ERR_LIMIT, line,
                "more than %d loop iterations in one render (a runaway template?)",
                CT_MAX_ITERATIONS);
        return false;
    }
    return true;
}

static int exec_for(ct_ctx *ctx, const ct_node *n) {
    ct_value *seq = ct_eval(ctx, n->expr);
    if (!seq) return CT_ERROR;
    size_t count;
    ct_value **items = ct_iterate(ctx, seq, &count, n->line);
    if (!items) return CT_ERROR;
    ct_scope *outer = ctx->scope;
    if (n->filter) { /* the `if` of the loop: evaluated with the loop variables bound */
        ct_value **kept = count ? ct_alloc(ctx, count * sizeof *kept) : items;
        if (!kept) return CT_ERROR;
        size_t nk = 0;
        ct_scope sc = {.parent = outer};
        for (size_t i = 0; i < count; i++) {
            sc.n = 0;
            if (!count_iteration(ctx, n->line) || !bind_targets(ctx, n, &sc, items[i]))
                return CT_ERROR;
            ctx->scope = &sc;
            ct_value *keep = ct_eval(ctx, n->filter);
            ctx->scope = outer;
            if (!keep) return CT_ERROR;
            if (ct_truthy(keep)) kept[nk++] = items[i];
        }
        items = kept;
        count = nk;
    }
    if (count == 0) return ct_exec(ctx, &n->orelse) == CT_ERROR ? CT_ERROR : CT_NEXT;
    ct_loop *loop = ct_alloc(ctx, sizeof *loop);
    ct_value *lv = new_value(ctx, CV_LOOP);
    if (!loop || !lv) return CT_ERROR;
    *loop = (ct_loop){.items = items, .n = count};
    lv->loop = loop;
    /* each iteration has a scope of its own: a set inside the body is gone after it (the
     * storage is reused: nothing can hold on to a scope) */
    ct_scope sc = {.parent = outer};
    for (size_t i = 0; i < count; i++) {
        sc.n = 0;
        loop->pos = i;
        if (!count_iteration(ctx, n->line) || !ct_scope_set(ctx, &sc, "loop", lv) ||
            !bind_targets(ctx, n, &sc, items[i]))
            return CT_ERROR;
        ctx->scope = &sc;
        int r = ct_exec(ctx, &n->body);
        ctx->scope = outer;
        if (r == CT_ERROR) return CT_ERROR;
        if (r == CT_BREAK) break;
    }
    return CT_NEXT;
}

static int exec_set(ct_ctx *ctx, const ct_node *n) {
    ct_value *v;
    if (n->kind == CS_SETBLOCK) {
        ct_sb saved = ctx->out;
        ctx->out = (ct_sb){0};
        int r = ct_exec(ctx, &n->body);
        ct_sb body = ctx->out;
        ctx->out = saved;
        if (r == CT_ERROR) {
            free(body.s);
            return CT_ERROR;
        }
        if (!(v = ct_sb_finish(ctx, &body))) return CT_ERROR;
    } else if (!(v = ct_eval(ctx, n->expr))) {
        return CT_ERROR;
    }
    if (n->attr) {
        ct_value *obj = lookup(ctx, n->targets[0]);
        if (!obj || obj->kind != CV_DICT || !obj->ns) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, n->line,
                    "cannot assign attribute on non-namespace object '%s'", n->targets[0]);
            return CT_ERROR;
        }
        ct_value *key = ct_str(ctx, n->attr, strlen(n->attr));
        return key && ct_dict_set(ctx, obj, key, v) ? CT_NEXT : CT_ERROR;
    }
    return ct_scope_set(ctx, ctx->scope, n->targets[0], v) ? CT_NEXT : CT_ERROR;
}

int ct_exec(ct_ctx *ctx, const ct_block *block) {
    for (size_t i = 0; i < block->n; i++) {
        const ct_node *n = block->nodes[i];
        int r = CT_NEXT;
        ct_value *v;
        if (ctx->err) return CT_ERROR;
        switch (n->kind) {
        case CS_TEXT:
            if (!ct_sb_put(ctx, &ctx->out, n->text, n->len)) return CT_ERROR;
            break;
        case CS_OUT:
            if (!(v = ct_eval(ctx, n->expr)) || !(v = ct_to_str(ctx, v)) ||
                !ct_sb_put(ctx, &ctx->out, v->str.s, v->str.len))
                return CT_ERROR;
            break;
        case CS_IF:
            if (!(v = ct_eval(ctx, n->expr))) return CT_ERROR;
            r = ct_exec(ctx, ct_truthy(v) ? &n->body : &n->orelse);
            break;
        case CS_FOR: r = exec_for(ctx, n); break;
        case CS_SET:
        case CS_SETBLOCK: r = exec_set(ctx, n); break;
        case CS_BLOCK: r = ct_exec(ctx, &n->body); break;
        case CS_BREAK: return CT_BREAK;
        case CS_CONTINUE: return CT_CONTINUE;
        }
        if (r != CT_NEXT) return r;
    }
    return ctx->err ? CT_ERROR : CT_NEXT;
}

/* ---- tdm_chat_render --------------------------------------------------------------- */

static ct_value *const_value(ct_ctx *ctx, ct_kind kind) { return new_value(ctx, kind); }

/* The constants (the parser's literals use them too). */
static bool constants(ct_ctx *ctx) {
    if (!(ctx->undef = const_value(ctx, CV_UNDEF)) || !(ctx->none = const_value(ctx, CV_NONE)) ||
        !(ctx->vtrue = const_value(ctx, CV_BOOL)) || !(ctx->vfalse = const_value(ctx, CV_BOOL)) ||
        !(ctx->empty_str = ct_str_own(ctx, "", 0)))
        return false;
    ctx->vtrue->b = true;
    return true;
}

static bool setup(ct_ctx *ctx, ct_scope *globals, const tdm_chat_message *messages, size_t n,
                  bool add_generation_prompt, const char *bos, const char *eos) {
    ct_value *list = ct_list(ctx, n);
    ct_value *k_role = ct_str(ctx, "role", 4), *k_content = ct_str(ctx, "content", 7);
    if (!list || !k_role || !k_content) return false;
    for (size_t i = 0; i < n; i++) {
        const char *role = messages[i].role ? messages[i].role : "";
        const char *content = messages[i].content ? messages[i].content : "";
        /* the caller's strings outlive the render and values are never changed: no copies */
        ct_value *m = ct_dict(ctx), *r = ct_str_own(ctx, role, strlen(role));
        ct_value *c = ct_str_own(ctx, content, strlen(content));
        if (!m || !r || !c || !ct_dict_set(ctx, m, k_role, r) || !ct_dict_set(ctx, m, k_content, c))
            return false;
        list->list.items[i] = m;
    }
    ct_value *b = ct_str(ctx, bos ? bos : "", bos ? strlen(bos) : 0);
    ct_value *e = ct_str(ctx, eos ? eos : "", eos ? strlen(eos) : 0);
    /* transformers passes tools and documents, None when the caller has none */
    return b && e && ct_scope_set(ctx, globals, "messages", list) &&
           ct_scope_set(ctx, globals, "tools", ctx->none) &&
           ct_scope_set(ctx, globals, "documents", ctx->none) &&
           ct_scope_set(ctx, globals, "add_generation_prompt", ct_bool(ctx, add_generation_prompt)) &&
           ct_scope_set(ctx, globals, "bos_token", b) && ct_scope_set(ctx, globals, "eos_token", e);
}

/* The template as Jinja reads it: "\r\n" and "\r" as "\n", one final newline dropped. */
static char *normalize(ct_ctx *ctx, const char *src, size_t *len) {
    size_t n = strlen(src);
    char *d = ct_alloc(ctx, n + 1);
    if (!d) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            d[o++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            d[o++] = src[i];
        }
    }
    if (o && d[o - 1] == '\n') o--;
    d[o] = 0;
    *len = o;
    return d;
}

tdm_status *tdm_chat_render(const char *template_text, const tdm_chat_message *messages,
                            size_t n_messages, bool add_generation_prompt, const char *bos_token,
                            const char *eos_token, char **out) {
    if (!template_text || !out || (n_messages && !messages))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_chat_render: template_text, messages and out are required");
    if (!ct_utf8_valid(template_text, strlen(template_text)))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "chat template: the template is not valid UTF-8");
    for (size_t i = 0; i < n_messages; i++) {
        const char *r = messages[i].role, *c = messages[i].content;
        if ((r && !ct_utf8_valid(r, strlen(r))) || (c && !ct_utf8_valid(c, strlen(c))))
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "chat template: message %zu is not valid UTF-8", i);
    }
    if ((bos_token && !ct_utf8_valid(bos_token, strlen(bos_token))) ||
        (eos_token && !ct_utf8_valid(eos_token, strlen(eos_token))))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "chat template: bos/eos token is not valid UTF-8");
    ct_ctx ctx = {0};
    ct_scope globals = {0};
    ctx.scope = &globals;
    size_t len = 0;
    const char *src = constants(&ctx) ? normalize(&ctx, template_text, &len) : NULL;
    ct_block *prog = src ? ct_parse(&ctx, src, len) : NULL;
    if (prog && setup(&ctx, &globals, messages, n_messages, add_generation_prompt, bos_token, eos_token) &&
        ct_exec(&ctx, prog) == CT_ERROR && !ctx.err)
        ct_fail(&ctx, TDM_ERR_INTERNAL, 0, "chat template: render failed without a reason");
    if (!ctx.err) ct_sb_put(&ctx, &ctx.out, "", 0); /* allocates for an empty output */
    if (ctx.err) {
        tdm_status *st = ctx.err;
        ct_ctx_free(&ctx);
        return st;
    }
    *out = ctx.out.s;
    ctx.out = (ct_sb){0};
    ct_ctx_free(&ctx);
    return NULL;
}

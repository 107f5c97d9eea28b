/* Chat templates: lexer and parser (see chat_template_impl.h).
 *
 * The lexer follows Jinja's with transformers' settings: "\r\n" and "\r" become "\n" and one
 * final newline of the template is dropped; `{%-`/`{{-`/`{#-` strip the whitespace before the
 * tag, `-%}`/`-}}`/`-#}` the whitespace after it; trim_blocks drops the newline right after a
 * block or comment tag (not after `+%}`); lstrip_blocks drops the spaces and tabs between the
 * start of a line and a block or comment tag (not with `{%+`). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/chat_template_impl.h"

typedef enum ct_tkind {
    T_TEXT,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STR,
    T_INT,
    T_OP,
    T_EOF,
} ct_tkind;

typedef struct ct_token {
    ct_tkind kind;
    int line;
    const char *s; /* TEXT, NAME, OP: in the source; STR: decoded, in the arena */
    size_t len;
    int64_t i;
} ct_token;

typedef struct ct_parser {
    ct_ctx *ctx;
    ct_token *toks;
    size_t n, cap, pos;
    int depth;
    int loops; /* for bodies being parsed: break / continue are allowed inside */
} ct_parser;

/* ---- lexer ------------------------------------------------------------------------- */

static bool push_tok(ct_parser *p, ct_tkind kind, int line, const char *s, size_t len) {
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 256;
        ct_token *nt = ct_alloc(p->ctx, ncap * sizeof *nt);
        if (!nt) return false;
        if (p->n) memcpy(nt, p->toks, p->n * sizeof *nt);
        p->toks = nt;
        p->cap = ncap;
    }
    p->toks[p->n++] = (ct_token){.kind = kind, .line = line, .s = s, .len = len};
    return true;
}

static int count_lines(const char *s, size_t len) {
    int n = 0;
    for (size_t i = 0; i < len; i++) n += s[i] == '\n';
    return n;
}

/* Length of the whitespace (Python's \s) at the start of s. */
static size_t span_space(const char *s, size_t len) {
    size_t i = 0, n;
    while (i < len && ct_is_space(s + i, len - i, &n)) i += n;
    return i;
}

/* Length of s without its trailing whitespace. */
static size_t rstrip_len(const char *s, size_t len) {
    size_t i = 0, keep = 0, n;
    while (i < len) {
        if (ct_is_space(s + i, len - i, &n)) {
            i += n;
        } else {
            i += n;
            keep = i;
        }
    }
    return keep;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal at src[*pos] (a quote): Python's escapes (\n \t \r \\ \' \" \xhh \uhhhh
 * \Uhhhhhhhh, octal, \a \b \f \v; others keep their backslash). */
static bool lex_string(ct_parser *p, const char *src, size_t len, size_t *pos, int line) {
    char q = src[*pos];
    size_t i = *pos + 1, start = i;
    while (i < len && src[i] != q) i += src[i] == '\\' && i + 1 < len ? 2 : 1;
    if (i >= len) {
        ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, line, "unterminated string literal");
        return false;
    }
    size_t end = i;
    char *d = ct_alloc(p->ctx, end - start + 1);
    if (!d) return false;
    size_t o = 0;
    for (i = start; i < end;) {
        if (src[i] != '\\') {
            d[o++] = src[i++];
            continue;
        }
        char c = src[i + 1];
        i += 2;
        switch (c) {
        case 'n': d[o++] = '\n'; continue;
        case 't': d[o++] = '\t'; continue;
        case 'r': d[o++] = '\r'; continue;
        case 'a': d[o++] = '\a'; continue;
        case 'b': d[o++] = '\b'; continue;
        case 'f': d[o++] = '\f'; continue;
        case 'v': d[o++] = '\v'; continue;
        case '\\': d[o++] = '\\'; continue;
        case '\'': d[o++] = '\''; continue;
        case '"': d[o++] = '"'; continue;
        case '\n': continue; /* line continuation */
        default: break;
        }
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + (size_t)k < end ? hexval(src[i + (size_t)k]) : -1;
                if (h < 0) {
                    ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, line,
                            "truncated \\%c escape in a string literal", c);
                    return false;
                }
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, line,
                        "escape of code point U+%X in a string literal", (unsigned)cp);
                return false;
            }
            i += (size_t)digits;
            o += ct_utf8_put(d + o, cp); /* never longer than the escape itself */
        } else if (c >= '0' && c <= '7') {
            uint32_t cp = (uint32_t)(c - '0');
            for (int k = 0; k < 2 && i < end && src[i] >= '0' && src[i] <= '7'; k++, i++)
                cp = cp * 8 + (uint32_t)(src[i] - '0');
            o += ct_utf8_put(d + o, cp);
        } else {
            d[o++] = '\\';
            i--; /* the character itself is copied as text */
        }
    }
    d[o] = 0;
    if (!push_tok(p, T_STR, line, d, o)) return false;
    *pos = end + 1;
    return true;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~<>=()[]{}.,:|";

/* The tokens of one {{ }} or {% %} tag from src[*pos] (after the opening and its sign) to
 * the end marker inclusive; *pos ends after it, *strip_after says it had a '-', *keep_nl a
 * '+'. */
static bool lex_tag(ct_parser *p, const char *src, size_t len, size_t *pos, int *line,
                    bool block, bool *strip_after, bool *keep_nl) {
    ct_ctx *ctx = p->ctx;
    int open_line = *line;
    size_t i = *pos;
    int depth = 0;
    char close = block ? '%' : '}';
    for (;;) {
        while (i < len && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r')) {
            if (src[i] == '\n') (*line)++;
            i++;
        }
        if (i >= len) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, open_line, "unterminated %s tag",
                    block ? "{% %}" : "{{ }}");
            return false;
        }
        if (depth == 0) {
            size_t k = i;
            char sign = 0;
            if ((src[k] == '-' || (block && src[k] == '+')) && k + 2 < len &&
                src[k + 1] == close && src[k + 2] == '}') {
                sign = src[k];
                k++;
            }
            if (k + 1 < len && src[k] == close && src[k + 1] == '}') {
                if (!push_tok(p, block ? T_BLOCK_END : T_VAR_END, *line, src + i, k + 2 - i))
                    return false;
                *pos = k + 2;
                *strip_after = sign == '-';
                *keep_nl = sign == '+';
                return true;
            }
        }
        char c = src[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t s = i;
            while (i < len && ((src[i] >= 'a' && src[i] <= 'z') || (src[i] >= 'A' && src[i] <= 'Z') ||
                               (src[i] >= '0' && src[i] <= '9') || src[i] == '_'))
                i++;
            if (!push_tok(p, T_NAME, *line, src + s, i - s)) return false;
        } else if (c >= '0' && c <= '9') {
            size_t s = i;
            int64_t v = 0;
            while (i < len && ((src[i] >= '0' && src[i] <= '9') || src[i] == '_')) {
                if (src[i] != '_') {
                    if (v > (INT64_MAX - (src[i] - '0')) / 10) {
                        ct_fail(ctx, TDM_ERR_UNSUPPORTED, *line, "integer literal too large");
                        return false;
                    }
                    v = v * 10 + (src[i] - '0');
                }
                i++;
            }
            if (i + 1 < len && (src[i] == '.' && src[i + 1] >= '0' && src[i + 1] <= '9')) {
                ct_fail(ctx, TDM_ERR_UNSUPPORTED, *line, "float literal '%.*s...'",
                        (int)(i + 2 - s), src + s);
                return false;
            }
            if (i < len && (src[i] == 'e' || src[i] == 'E')) {
                ct_fail(ctx, TDM_ERR_UNSUPPORTED, *line, "float literal");
                return false;
            }
            if (!push_tok(p, T_INT, *line, src + s, i - s)) return false;
            p->toks[p->n - 1].i = v;
        } else if (c == '\'' || c == '"') {
            int l0 = *line;
            size_t s = i;
            if (!lex_string(p, src, len, &i, l0)) return false;
            *line += count_lines(src + s, i - s);
        } else {
            size_t oplen = 0;
            for (size_t k = 0; k < sizeof OPS2 / sizeof OPS2[0]; k++)
                if (i + 1 < len && src[i] == OPS2[k][0] && src[i + 1] == OPS2[k][1]) oplen = 2;
            if (!oplen && strchr(OPS1, c) && c) oplen = 1;
            if (!oplen) {
                if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7F)
                    ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, *line,
                            "unexpected byte 0x%02x in a tag", (unsigned char)c);
                else
                    ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, *line, "unexpected character '%c'", c);
                return false;
            }
            if (oplen == 1 && (c == '(' || c == '[' || c == '{')) depth++;
            if (oplen == 1 && (c == ')' || c == ']' || c == '}')) {
                if (depth == 0) {
                    ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, *line, "unexpected '%c'", c);
                    return false;
                }
                depth--;
            }
            if (!push_tok(p, T_OP, *line, src + i, oplen)) return false;
            i += oplen;
        }
    }
}

static bool lex(ct_parser *p, const char *src, size_t len) {
    ct_ctx *ctx = p->ctx;
    size_t pos = 0;
    int line = 1;
    bool line_starting = true;
    while (pos < len) {
        size_t t = pos;
        while (t + 1 < len && !(src[t] == '{' && (src[t + 1] == '{' || src[t + 1] == '%' ||
                                                  src[t + 1] == '#')))
            t++;
        if (t + 1 >= len) t = len;
        size_t tlen = t - pos;
        char kind = t < len ? src[t + 1] : 0;
        char sign = t + 2 < len && (src[t + 2] == '-' || src[t + 2] == '+') ? src[t + 2] : 0;
        if (kind && sign == '-') {
            tlen = rstrip_len(src + pos, tlen);
        } else if (kind && sign != '+' && kind != '{') {
            size_t l_pos = 0;
            for (size_t k = 0; k < tlen; k++)
                if (src[pos + k] == '\n') l_pos = k + 1;
            if ((l_pos > 0 || line_starting) && l_pos < tlen &&
                span_space(src + pos + l_pos, tlen - l_pos) == tlen - l_pos)
                tlen = l_pos;
        }
        if (tlen && !push_tok(p, T_TEXT, line, src + pos, tlen)) return false;
        line += count_lines(src + pos, t - pos);
        if (t >= len) break;
        pos = t + 2 + (sign ? 1 : 0);
        bool strip_after = false, keep_nl = false;
        if (kind == '#') {
            int open_line = line;
            size_t e = pos;
            while (e + 1 < len && !(src[e] == '#' && src[e + 1] == '}')) e++;
            if (e + 1 >= len) {
                ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, open_line, "unterminated comment");
                return false;
            }
            line += count_lines(src + pos, e - pos);
            strip_after = e > pos && src[e - 1] == '-';
            keep_nl = e > pos && src[e - 1] == '+';
            pos = e + 2;
        } else {
            if (!push_tok(p, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, line, src + t, 2))
                return false;
            if (!lex_tag(p, src, len, &pos, &line, kind == '%', &strip_after, &keep_nl))
                return false;
        }
        size_t after = pos;
        if (strip_after) {
            pos += span_space(src + pos, len - pos);
        } else if (kind != '{' && !keep_nl && pos < len && src[pos] == '\n') {
            pos++;
        }
        line += count_lines(src + after, pos - after);
        line_starting = pos > after && src[pos - 1] == '\n';
    }
    return push_tok(p, T_EOF, line, src + len, 0);
}

/* ---- expressions ------------------------------------------------------------------- */

static ct_token *peek(ct_parser *p) { return &p->toks[p->pos]; }
static ct_token *peek2(ct_parser *p) {
    return p->pos + 1 < p->n ? &p->toks[p->pos + 1] : &p->toks[p->n - 1];
}
static int cur_line(ct_parser *p) { return peek(p)->line; }

static bool is_op(const ct_token *t, const char *op) {
    return t->kind == T_OP && t->len == strlen(op) && memcmp(t->s, op, t->len) == 0;
}
static bool is_name(const ct_token *t, const char *name) {
    return t->kind == T_NAME && t->len == strlen(name) && memcmp(t->s, name, t->len) == 0;
}
static bool accept_op(ct_parser *p, const char *op) {
    if (!is_op(peek(p), op)) return false;
    p->pos++;
    return true;
}
static bool accept_name(ct_parser *p, const char *name) {
    if (!is_name(peek(p), name)) return false;
    p->pos++;
    return true;
}

static const char *tok_desc(ct_parser *p, const ct_token *t) {
    switch (t->kind) {
    case T_TEXT: return "template text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STR: return "a string";
    case T_INT: return "an integer";
    case T_EOF: return "the end of the template";
    default: break;
    }
    char *d = ct_alloc(p->ctx, t->len + 3);
    if (!d) return "?";
    snprintf(d, t->len + 3, "'%.*s'", (int)t->len, t->s);
    return d;
}

static bool expect_op(ct_parser *p, const char *op) {
    if (accept_op(p, op)) return true;
    ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, cur_line(p), "expected '%s', found %s", op,
            tok_desc(p, peek(p)));
    return false;
}

static const char *expect_ident(ct_parser *p) {
    ct_token *t = peek(p);
    if (t->kind != T_NAME) {
        ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, t->line, "expected a name, found %s",
                tok_desc(p, t));
        return NULL;
    }
    p->pos++;
    return ct_strndup(p->ctx, t->s, t->len);
}

static ct_expr *new_expr(ct_parser *p, ct_ekind kind, int line) {
    ct_expr *e = ct_alloc(p->ctx, sizeof *e);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->line = line;
    return e;
}

static ct_expr *parse_expr(ct_parser *p);
static ct_expr *parse_tuple(ct_parser *p);
static ct_expr *parse_or(ct_parser *p);
static ct_expr *parse_unary(ct_parser *p, bool with_filter);

static bool enter(ct_parser *p) {
    if (++p->depth > CT_MAX_DEPTH) {
        ct_fail(p->ctx, TDM_ERR_LIMIT, cur_line(p), "template nested deeper than %d levels",
                CT_MAX_DEPTH);
        return false;
    }
    return true;
}

/* A growing array of expressions (and keyword names) in the arena. */
static bool push_arg(ct_parser *p, ct_expr *e, ct_expr *arg, const char *kw, size_t *cap) {
    if (e->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        ct_expr **na = ct_alloc(p->ctx, ncap * sizeof *na);
        const char **nn = ct_alloc(p->ctx, ncap * sizeof *nn);
        if (!na || !nn) return false;
        if (e->n) {
            memcpy(na, e->args, e->n * sizeof *na);
            memcpy(nn, e->argnames, e->n * sizeof *nn);
        }
        e->args = na;
        e->argnames = nn;
        *cap = ncap;
    }
    e->args[e->n] = arg;
    e->argnames[e->n] = kw;
    e->n++;
    return true;
}

/* `(` already consumed: arguments up to `)`. */
static bool parse_args(ct_parser *p, ct_expr *e) {
    size_t cap = 0;
    while (!accept_op(p, ")")) {
        if (e->n && !expect_op(p, ",")) return false;
        if (accept_op(p, ")")) break;
        if (is_op(peek(p), "*")) {
            ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, cur_line(p), "*args / **kwargs in a call");
            return false;
        }
        const char *kw = NULL;
        if (peek(p)->kind == T_NAME && is_op(peek2(p), "=")) {
            kw = expect_ident(p);
            p->pos++;
            if (!kw) return false;
        }
        ct_expr *a = parse_expr(p);
        if (!a || !push_arg(p, e, a, kw, &cap)) return false;
    }
    return true;
}

static ct_expr *parse_primary(ct_parser *p) {
    ct_ctx *ctx = p->ctx;
    ct_token *t = peek(p);
    int line = t->line;
    if (t->kind == T_NAME) {
        p->pos++;
        ct_expr *e = new_expr(p, CE_LIT, line);
        if (!e) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) e->lit = ctx->vtrue;
        else if (is_name(t, "false") || is_name(t, "False")) e->lit = ctx->vfalse;
        else if (is_name(t, "none") || is_name(t, "None")) e->lit = ctx->none;
        else {
            e->kind = CE_NAME;
            e->name = ct_strndup(ctx, t->s, t->len);
            if (!e->name) return NULL;
        }
        return e;
    }
    if (t->kind == T_STR) {
        /* adjacent literals concatenate */
        size_t total = 0, k = p->pos;
        while (p->toks[k].kind == T_STR) total += p->toks[k++].len;
        char *s = ct_alloc(ctx, total + 1);
        if (!s) return NULL;
        size_t o = 0;
        for (; p->pos < k; p->pos++) {
            memcpy(s + o, p->toks[p->pos].s, p->toks[p->pos].len);
            o += p->toks[p->pos].len;
        }
        ct_expr *e = new_expr(p, CE_LIT, line);
        if (!e || !(e->lit = ct_str_own(ctx, s, total))) return NULL;
        return e;
    }
    if (t->kind == T_INT) {
        p->pos++;
        ct_expr *e = new_expr(p, CE_LIT, line);
        if (!e || !(e->lit = ct_int(ctx, t->i))) return NULL;
        return e;
    }
    if (is_op(t, "(")) {
        p->pos++;
        if (accept_op(p, ")")) { /* () */
            ct_expr *e = new_expr(p, CE_LIST, line);
            if (e) e->negate = true;
            return e;
        }
        ct_expr *first = parse_expr(p);
        if (!first) return NULL;
        if (accept_op(p, ")")) return first;
        /* a tuple: a list that prints as a tuple */
        ct_expr *e = new_expr(p, CE_LIST, line);
        size_t cap = 0;
        if (!e || !push_arg(p, e, first, NULL, &cap)) return NULL;
        e->negate = true;
        while (!accept_op(p, ")")) {
            if (!expect_op(p, ",")) return NULL;
            if (accept_op(p, ")")) break;
            ct_expr *a = parse_expr(p);
            if (!a || !push_arg(p, e, a, NULL, &cap)) return NULL;
        }
        return e;
    }
    if (is_op(t, "[")) {
        p->pos++;
        ct_expr *e = new_expr(p, CE_LIST, line);
        size_t cap = 0;
        if (!e) return NULL;
        while (!accept_op(p, "]")) {
            if (e->n && !expect_op(p, ",")) return NULL;
            if (accept_op(p, "]")) break;
            ct_expr *a = parse_expr(p);
            if (!a || !push_arg(p, e, a, NULL, &cap)) return NULL;
        }
        return e;
    }
    if (is_op(t, "{")) {
        p->pos++;
        ct_expr *e = new_expr(p, CE_DICT, line);
        size_t cap = 0;
        if (!e) return NULL;
        while (!accept_op(p, "}")) {
            if (e->n && !expect_op(p, ",")) return NULL;
            if (accept_op(p, "}")) break;
            ct_expr *k = parse_expr(p);
            if (!k || !expect_op(p, ":")) return NULL;
            ct_expr *v = parse_expr(p);
            if (!v || !push_arg(p, e, k, NULL, &cap) || !push_arg(p, e, v, NULL, &cap))
                return NULL;
        }
        return e;
    }
    ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "unexpected %s in an expression", tok_desc(p, t));
    return NULL;
}

static ct_expr *parse_postfix(ct_parser *p, ct_expr *node) {
    for (;;) {
        int line = cur_line(p);
        if (accept_op(p, ".")) {
            ct_token *t = peek(p);
            if (t->kind == T_INT) { /* x.0 is x[0] */
                p->pos++;
                ct_expr *e = new_expr(p, CE_ITEM, line), *idx = new_expr(p, CE_LIT, line);
                if (!e || !idx || !(idx->lit = ct_int(p->ctx, t->i))) return NULL;
                e->a = node;
                e->b = idx;
                node = e;
                continue;
            }
            const char *name = expect_ident(p);
            if (!name) return NULL;
            ct_expr *e = new_expr(p, CE_ATTR, line);
            if (!e) return NULL;
            e->a = node;
            e->name = name;
            if (accept_op(p, "(")) {
                e->kind = CE_METHOD;
                if (!parse_args(p, e)) return NULL;
            }
            node = e;
        } else if (accept_op(p, "[")) {
            ct_expr *parts[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (is_op(peek(p), "]")) break;
                if (accept_op(p, ":")) {
                    if (++colons > 2) {
                        ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, line, "bad slice");
                        return NULL;
                    }
                    continue;
                }
                if (parts[colons]) {
                    ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, line, "expected ']' or ':', found %s",
                            tok_desc(p, peek(p)));
                    return NULL;
                }
                if (!(parts[colons] = parse_expr(p))) return NULL;
                if (is_op(peek(p), ",")) {
                    ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, line, "tuple subscript");
                    return NULL;
                }
            }
            p->pos++;
            ct_expr *e = new_expr(p, colons ? CE_SLICE : CE_ITEM, line);
            if (!e) return NULL;
            if (!colons && !parts[0]) {
                ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, line, "empty subscript");
                return NULL;
            }
            e->a = node;
            e->b = parts[0];
            e->c = parts[1];
            e->d = parts[2];
            node = e;
        } else if (is_op(peek(p), "(")) {
            if (node->kind != CE_NAME) {
                ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, line,
                        "calling something other than a named function or a method");
                return NULL;
            }
            p->pos++;
            node->kind = CE_CALL;
            if (!parse_args(p, node)) return NULL;
        } else {
            return node;
        }
    }
}

static ct_expr *parse_filters(ct_parser *p, ct_expr *node) {
    for (;;) {
        int line = cur_line(p);
        if (accept_op(p, "|")) {
            ct_expr *e = new_expr(p, CE_FILTER, line);
            if (!e || !(e->name = expect_ident(p))) return NULL;
            e->a = node;
            if (accept_op(p, "(") && !parse_args(p, e)) return NULL;
            node = e;
        } else if (accept_name(p, "is")) {
            ct_expr *e = new_expr(p, CE_TEST, line);
            if (!e) return NULL;
            e->negate = accept_name(p, "not");
            if (!(e->name = expect_ident(p))) return NULL;
            e->a = node;
            ct_token *t = peek(p);
            if (accept_op(p, "(")) {
                if (!parse_args(p, e)) return NULL;
            } else if ((t->kind == T_NAME && !is_name(t, "else") && !is_name(t, "or") &&
                        !is_name(t, "and")) ||
                       t->kind == T_STR || t->kind == T_INT || is_op(t, "[") || is_op(t, "{")) {
                /* one argument without parentheses, as Jinja reads it: any name but
                 * else/or/and (so `x is eq if` fails as it fails there) */
                if (is_name(t, "is")) {
                    ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, line, "tests cannot be chained with 'is'");
                    return NULL;
                }
                ct_expr *arg = parse_primary(p);
                size_t cap = 0;
                if (!arg || !(arg = parse_postfix(p, arg)) || !push_arg(p, e, arg, NULL, &cap))
                    return NULL;
            }
            node = e;
        } else if (is_op(peek(p), "(")) {
            ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, line, "calling the result of a filter or test");
            return NULL;
        } else {
            return node;
        }
    }
}

static ct_expr *parse_unary(ct_parser *p, bool with_filter) {
    int line = cur_line(p);
    if (!enter(p)) return NULL;
    ct_expr *node;
    if (accept_op(p, "-")) {
        node = new_expr(p, CE_NEG, line);
        if (!node || !(node->a = parse_unary(p, false))) return NULL;
    } else if (accept_op(p, "+")) {
        node = parse_unary(p, false);
    } else {
        node = parse_primary(p);
        if (node) node = parse_postfix(p, node);
    }
    if (node && with_filter) node = parse_filters(p, node);
    p->depth--;
    return node;
}

static ct_expr *binary(ct_parser *p, ct_ekind kind, const char *op, ct_expr *a, ct_expr *b,
                       int line) {
    if (!a || !b) return NULL;
    ct_expr *e = new_expr(p, kind, line);
    if (!e) return NULL;
    e->name = op;
    e->a = a;
    e->b = b;
    return e;
}

static ct_expr *parse_math2(ct_parser *p) {
    ct_expr *l = parse_unary(p, true);
    while (l) {
        int line = cur_line(p);
        const char *op = accept_op(p, "*") ? "*" : accept_op(p, "//") ? "//"
                       : accept_op(p, "/") ? "/" : accept_op(p, "%") ? "%" : NULL;
        if (!op) {
            if (is_op(peek(p), "**")) {
                ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, line, "operator '**'");
                return NULL;
            }
            break;
        }
        l = binary(p, CE_BIN, op, l, parse_unary(p, true), line);
    }
    return l;
}

static ct_expr *parse_concat(ct_parser *p) {
    ct_expr *l = parse_math2(p);
    while (l && is_op(peek(p), "~")) {
        int line = cur_line(p);
        p->pos++;
        l = binary(p, CE_BIN, "~", l, parse_math2(p), line);
    }
    return l;
}

static ct_expr *parse_math1(ct_parser *p) {
    ct_expr *l = parse_concat(p);
    while (l) {
        int line = cur_line(p);
        const char *op = accept_op(p, "+") ? "+" : accept_op(p, "-") ? "-" : NULL;
        if (!op) break;
        l = binary(p, CE_BIN, op, l, parse_concat(p), line);
    }
    return l;
}

static ct_expr *parse_compare(ct_parser *p) {
    static const char *const CMPS[] = {"==", "!=", "<=", ">=", "<", ">"};
    ct_expr *l = parse_math1(p);
    ct_expr *result = NULL; /* chained comparisons: a < b < c is (a < b) and (b < c) */
    while (l) {
        int line = cur_line(p);
        const char *op = NULL;
        for (size_t k = 0; k < sizeof CMPS / sizeof CMPS[0] && !op; k++)
            if (accept_op(p, CMPS[k])) op = CMPS[k];
        if (!op && accept_name(p, "in")) op = "in";
        if (!op && is_name(peek(p), "not") && is_name(peek2(p), "in")) {
            p->pos += 2;
            op = "not in";
        }
        if (!op) break;
        ct_expr *r = parse_math1(p);
        ct_expr *cmp = binary(p, CE_CMP, op, l, r, line);
        if (!cmp) return NULL;
        result = result ? binary(p, CE_AND, "and", result, cmp, line) : cmp;
        if (!result) return NULL;
        l = r;
    }
    return l ? (result ? result : l) : NULL;
}

static ct_expr *parse_not(ct_parser *p) {
    int line = cur_line(p);
    if (accept_name(p, "not")) {
        if (!enter(p)) return NULL;
        ct_expr *e = new_expr(p, CE_NOT, line);
        if (!e || !(e->a = parse_not(p))) return NULL;
        p->depth--;
        return e;
    }
    return parse_compare(p);
}

static ct_expr *parse_and(ct_parser *p) {
    ct_expr *l = parse_not(p);
    while (l && is_name(peek(p), "and")) {
        int line = cur_line(p);
        p->pos++;
        l = binary(p, CE_AND, "and", l, parse_not(p), line);
    }
    return l;
}

static ct_expr *parse_or(ct_parser *p) {
    ct_expr *l = parse_and(p);
    while (l && is_name(peek(p), "or")) {
        int line = cur_line(p);
        p->pos++;
        l = binary(p, CE_OR, "or", l, parse_and(p), line);
    }
    return l;
}

/* An expression, or a tuple of them (`a, b`): for {{ }} and set. */
static ct_expr *parse_tuple(ct_parser *p) {
    int line = cur_line(p);
    ct_expr *first = parse_expr(p);
    if (!first || !is_op(peek(p), ",")) return first;
    ct_expr *e = new_expr(p, CE_LIST, line);
    size_t cap = 0;
    if (!e || !push_arg(p, e, first, NULL, &cap)) return NULL;
    e->negate = true;
    while (accept_op(p, ",")) {
        ct_token *t = peek(p);
        if (t->kind == T_VAR_END || t->kind == T_BLOCK_END) break;
        ct_expr *a = parse_expr(p);
        if (!a || !push_arg(p, e, a, NULL, &cap)) return NULL;
    }
    return e;
}

static ct_expr *parse_expr(ct_parser *p) {
    if (!enter(p)) return NULL;
    ct_expr *e = parse_or(p);
    while (e && is_name(peek(p), "if")) {
        int line = cur_line(p);
        p->pos++;
        ct_expr *c = new_expr(p, CE_COND, line);
        if (!c || !(c->a = parse_or(p))) return NULL;
        c->b = e;
        if (accept_name(p, "else") && !(c->c = parse_expr(p))) return NULL;
        e = c;
    }
    p->depth--;
    return e;
}

/* ---- statements -------------------------------------------------------------------- */

static bool push_node(ct_parser *p, ct_block *b, ct_node *n) {
    if (b->n == b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 8;
        ct_node **nn = ct_alloc(p->ctx, ncap * sizeof *nn);
        if (!nn) return false;
        if (b->n) memcpy(nn, b->nodes, b->n * sizeof *nn);
        b->nodes = nn;
        b->cap = ncap;
    }
    b->nodes[b->n++] = n;
    return true;
}

static ct_node *new_node(ct_parser *p, ct_skind kind, int line) {
    ct_node *n = ct_alloc(p->ctx, sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

static bool expect_block_end(ct_parser *p) {
    if (peek(p)->kind == T_BLOCK_END) {
        p->pos++;
        return true;
    }
    ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, cur_line(p), "expected '%%}', found %s",
            tok_desc(p, peek(p)));
    return false;
}

/* Statements into `out` until a block tag whose keyword is one of `stops` (NULL-ended;
 * NULL = until the end of the template). Returns the index of the stop found, with the
 * keyword consumed, or -1 (error). `what` names the open block for messages. */
static int parse_body(ct_parser *p, ct_block *out, const char *const *stops, const char *what,
                      int open_line);

static bool parse_if_rest(ct_parser *p, ct_node *n) {
    static const char *const STOPS[] = {"elif", "else", "endif", NULL};
    /* the condition: no inline `a if b else c` at its top, as in Jinja */
    if (!enter(p)) return false;
    n->expr = parse_or(p);
    p->depth--;
    if (!n->expr || !expect_block_end(p)) return false;
    int stop = parse_body(p, &n->body, STOPS, "if", n->line);
    if (stop < 0) return false;
    if (stop == 0) {
        ct_node *elif = new_node(p, CS_IF, cur_line(p));
        return elif && push_node(p, &n->orelse, elif) && parse_if_rest(p, elif);
    }
    if (stop == 1) {
        static const char *const END[] = {"endif", NULL};
        if (!expect_block_end(p) || parse_body(p, &n->orelse, END, "if", n->line) < 0)
            return false;
    }
    return expect_block_end(p);
}

static bool parse_for(ct_parser *p, ct_node *n) {
    size_t cap = 0;
    bool paren = accept_op(p, "(");
    do {
        const char *name = expect_ident(p);
        if (!name) return false;
        if (n->n_targets == cap) {
            size_t ncap = cap ? cap * 2 : 2;
            const char **nt = ct_alloc(p->ctx, ncap * sizeof *nt);
            if (!nt) return false;
            if (n->n_targets) memcpy(nt, n->targets, n->n_targets * sizeof *nt);
            n->targets = nt;
            cap = ncap;
        }
        n->targets[n->n_targets++] = name;
    } while (accept_op(p, ","));
    if (paren && !expect_op(p, ")")) return false;
    if (!accept_name(p, "in")) {
        ct_fail(p->ctx, TDM_ERR_INVALID_ARGUMENT, cur_line(p), "expected 'in' in a for loop");
        return false;
    }
    if (!enter(p)) return false;
    n->expr = parse_or(p);
    p->depth--;
    if (!n->expr) return false;
    if (accept_name(p, "if") && !(n->filter = parse_expr(p))) return false;
    if (is_name(peek(p), "recursive")) {
        ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, cur_line(p), "recursive for loops");
        return false;
    }
    if (!expect_block_end(p)) return false;
    static const char *const STOPS[] = {"else", "endfor", NULL};
    p->loops++;
    int stop = parse_body(p, &n->body, STOPS, "for", n->line);
    p->loops--;
    if (stop < 0) return false;
    if (stop == 0) {
        static const char *const END[] = {"endfor", NULL};
        if (!expect_block_end(p) || parse_body(p, &n->orelse, END, "for", n->line) < 0)
            return false;
    }
    return expect_block_end(p);
}

static bool parse_set(ct_parser *p, ct_node *n) {
    n->targets = ct_alloc(p->ctx, sizeof *n->targets);
    if (!n->targets || !(n->targets[0] = expect_ident(p))) return false;
    n->n_targets = 1;
    if (accept_op(p, ".") && !(n->attr = expect_ident(p))) return false;
    if (is_op(peek(p), ",")) {
        ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, n->line, "set with several targets");
        return false;
    }
    if (accept_op(p, "=")) return (n->expr = parse_tuple(p)) && expect_block_end(p);
    if (n->attr || is_op(peek(p), "|")) {
        ct_fail(p->ctx, TDM_ERR_UNSUPPORTED, n->line,
                n->attr ? "block set of an attribute" : "block set with a filter");
        return false;
    }
    if (!expect_block_end(p)) return false;
    n->kind = CS_SETBLOCK;
    static const char *const END[] = {"endset", NULL};
    return parse_body(p, &n->body, END, "set", n->line) >= 0 && expect_block_end(p);
}

static const char *const END_WORDS[] = {"endfor", "endif", "elif", "else", "endset",
                                        "endgeneration", "endmacro", "endblock", "endcall",
                                        "endfilter", "endraw", "endwith", NULL};

static int parse_body(ct_parser *p, ct_block *out, const char *const *stops, const char *what,
                      int open_line) {
    ct_ctx *ctx = p->ctx;
    if (!enter(p)) return -1;
    for (;;) {
        ct_token *t = peek(p);
        if (t->kind == T_EOF) {
            if (!stops) {
                p->depth--;
                return 0;
            }
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, open_line,
                    "unterminated {%% %s %%} block (expected {%% %s %%})", what, stops[0]);
            return -1;
        }
        if (t->kind == T_TEXT) {
            ct_node *n = new_node(p, CS_TEXT, t->line);
            if (!n) return -1;
            n->text = t->s;
            n->len = t->len;
            if (!push_node(p, out, n)) return -1;
            p->pos++;
            continue;
        }
        if (t->kind == T_VAR_BEGIN) {
            p->pos++;
            ct_node *n = new_node(p, CS_OUT, t->line);
            if (!n || !(n->expr = parse_tuple(p))) return -1;
            if (peek(p)->kind != T_VAR_END) {
                ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, cur_line(p), "expected '}}', found %s",
                        tok_desc(p, peek(p)));
                return -1;
            }
            p->pos++;
            if (!push_node(p, out, n)) return -1;
            continue;
        }
        /* a block tag */
        p->pos++;
        ct_token *kw = peek(p);
        int line = kw->line;
        if (kw->kind != T_NAME) {
            ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "expected a statement after '{%%', found %s",
                    tok_desc(p, kw));
            return -1;
        }
        for (int k = 0; stops && stops[k]; k++) {
            if (is_name(kw, stops[k])) {
                p->pos++;
                p->depth--;
                return k;
            }
        }
        p->pos++;
        ct_node *n = NULL;
        if (is_name(kw, "if")) {
            if (!(n = new_node(p, CS_IF, line)) || !parse_if_rest(p, n)) return -1;
        } else if (is_name(kw, "for")) {
            if (!(n = new_node(p, CS_FOR, line)) || !parse_for(p, n)) return -1;
        } else if (is_name(kw, "set")) {
            if (!(n = new_node(p, CS_SET, line)) || !parse_set(p, n)) return -1;
        } else if (is_name(kw, "generation")) {
            static const char *const END[] = {"endgeneration", NULL};
            if (!(n = new_node(p, CS_BLOCK, line)) || !expect_block_end(p) ||
                parse_body(p, &n->body, END, "generation", line) < 0 || !expect_block_end(p))
                return -1;
        } else if (is_name(kw, "break") || is_name(kw, "continue")) {
            /* transformers enables jinja2.ext.loopcontrols */
            if (p->loops == 0) {
                ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "'%.*s' outside of a loop",
                        (int)kw->len, kw->s);
                return -1;
            }
            if (!(n = new_node(p, is_name(kw, "break") ? CS_BREAK : CS_CONTINUE, line)) ||
                !expect_block_end(p))
                return -1;
        } else {
            bool end_word = false;
            for (int k = 0; END_WORDS[k]; k++) end_word |= is_name(kw, END_WORDS[k]);
            if (end_word)
                ct_fail(ctx, TDM_ERR_INVALID_ARGUMENT, line, "unexpected {%% %.*s %%}%s%s%s",
                        (int)kw->len, kw->s, stops ? " (expected {% " : "",
                        stops ? stops[0] : "", stops ? " %})" : "");
            else
                ct_fail(ctx, TDM_ERR_UNSUPPORTED, line, "the {%% %.*s %%} statement",
                        (int)kw->len, kw->s);
            return -1;
        }
        if (!push_node(p, out, n)) return -1;
    }
}

ct_block *ct_parse(ct_ctx *ctx, const char *src, size_t len) {
    ct_parser p = {.ctx = ctx};
    if (!lex(&p, src, len)) return NULL;
    ct_block *b = ct_alloc(ctx, sizeof *b);
    if (!b) return NULL;
    memset(b, 0, sizeof *b);
    if (parse_body(&p, b, NULL, NULL, 1) < 0) return NULL;
    return b;
}

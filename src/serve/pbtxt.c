/* tandem serve: bounded protobuf text format reader (see pbtxt.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "serve/pbtxt.h"

typedef enum tok_kind { T_EOF, T_IDENT, T_STRING, T_NUMBER, T_PUNCT } tok_kind;

typedef struct lexer {
    const char *s;
    size_t len, pos;
    int line;
    const char *what;
    size_t n_fields;
    /* current token */
    tok_kind kind;
    char punct;
    sv_buf text;
    int tok_line;
} lexer;

static sv_error *lex_err(lexer *lx, const char *msg) {
    return sv_err(400, "%s:%d: %s", lx->what, lx->tok_line ? lx->tok_line : lx->line, msg);
}

static void skip_space(lexer *lx) {
    while (lx->pos < lx->len) {
        char c = lx->s[lx->pos];
        if (c == '\n') {
            lx->line++;
            lx->pos++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx->pos++;
        } else if (c == '#') {
            while (lx->pos < lx->len && lx->s[lx->pos] != '\n') lx->pos++;
        } else {
            break;
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one quoted string (the opening quote at pos) and appends its bytes to lx->text. */
static sv_error *lex_string(lexer *lx) {
    char q = lx->s[lx->pos++];
    for (;;) {
        if (lx->pos >= lx->len || lx->s[lx->pos] == '\n') return lex_err(lx, "unterminated string");
        if (lx->text.len >= SV_PB_MAX_TOKEN) return lex_err(lx, "string is too long");
        char c = lx->s[lx->pos++];
        if (c == q) return NULL;
        if (c != '\\') {
            sv_buf_add(&lx->text, &c, 1);
            continue;
        }
        if (lx->pos >= lx->len) return lex_err(lx, "unterminated string");
        char e = lx->s[lx->pos++];
        char out;
        switch (e) {
        case 'n': out = '\n'; break;
        case 't': out = '\t'; break;
        case 'r': out = '\r'; break;
        case 'a': out = '\a'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'v': out = '\v'; break;
        case '\\': out = '\\'; break;
        case '\'': out = '\''; break;
        case '"': out = '"'; break;
        case '?': out = '?'; break;
        case 'x': {
            int v = 0, k = 0;
            while (k < 2 && lx->pos < lx->len && hexval(lx->s[lx->pos]) >= 0)
                v = v * 16 + hexval(lx->s[lx->pos++]), k++;
            if (!k) return lex_err(lx, "bad \\x escape in string");
            out = (char)v;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                int v = e - '0', k = 1;
                while (k < 3 && lx->pos < lx->len && lx->s[lx->pos] >= '0' && lx->s[lx->pos] <= '7')
                    v = v * 8 + (lx->s[lx->pos++] - '0'), k++;
                if (v > 255) return lex_err(lx, "octal escape out of range");
                out = (char)v;
                break;
            }
            return lex_err(lx, "unknown escape in string");
        }
        sv_buf_add(&lx->text, &out, 1);
    }
}

static sv_error *lex_next(lexer *lx) {
    skip_space(lx);
    lx->tok_line = lx->line;
    lx->text.len = 0;
    if (lx->text.p) lx->text.p[0] = 0;
    if (lx->pos >= lx->len) {
        lx->kind = T_EOF;
        return NULL;
    }
    char c = lx->s[lx->pos];
    if (c == '"' || c == '\'') {
        lx->kind = T_STRING;
        sv_error *e;
        do { /* adjacent strings concatenate */
            if ((e = lex_string(lx))) return e;
            skip_space(lx);
        } while (lx->pos < lx->len && (lx->s[lx->pos] == '"' || lx->s[lx->pos] == '\''));
        sv_buf_add(&lx->text, "", 0);
        return lx->text.oom ? sv_err(500, "out of memory") : NULL;
    }
    if (isalpha((unsigned char)c) || c == '_') {
        size_t st = lx->pos;
        while (lx->pos < lx->len && (isalnum((unsigned char)lx->s[lx->pos]) || lx->s[lx->pos] == '_'))
            lx->pos++;
        if (lx->pos - st > 256) return lex_err(lx, "identifier is too long");
        lx->kind = T_IDENT;
        sv_buf_add(&lx->text, lx->s + st, lx->pos - st);
        return lx->text.oom ? sv_err(500, "out of memory") : NULL;
    }
    if (isdigit((unsigned char)c) || c == '-' || c == '+' || c == '.') {
        size_t st = lx->pos;
        lx->pos++;
        if ((c == '-' || c == '+') && lx->pos < lx->len && isalpha((unsigned char)lx->s[lx->pos])) {
            /* -inf, -nan */
            while (lx->pos < lx->len && isalpha((unsigned char)lx->s[lx->pos])) lx->pos++;
            lx->kind = T_IDENT;
        } else {
            while (lx->pos < lx->len &&
                   (isalnum((unsigned char)lx->s[lx->pos]) || lx->s[lx->pos] == '.' ||
                    ((lx->s[lx->pos] == '-' || lx->s[lx->pos] == '+') &&
                     (lx->s[lx->pos - 1] == 'e' || lx->s[lx->pos - 1] == 'E'))))
                lx->pos++;
            lx->kind = T_NUMBER;
        }
        if (lx->pos - st > 64) return lex_err(lx, "number is too long");
        sv_buf_add(&lx->text, lx->s + st, lx->pos - st);
        return lx->text.oom ? sv_err(500, "out of memory") : NULL;
    }
    if (strchr("{}[]<>:,;", c)) {
        lx->kind = T_PUNCT;
        lx->punct = c;
        lx->pos++;
        return NULL;
    }
    char msg[64];
    snprintf(msg, sizeof msg, "unexpected character '%c'", isprint((unsigned char)c) ? c : '?');
    return lex_err(lx, msg);
}

static bool is_punct(const lexer *lx, char c) { return lx->kind == T_PUNCT && lx->punct == c; }

static sv_pb_field *add_field(sv_pb_msg *m, const char *name, int line) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        sv_pb_field *f = realloc(m->fields, cap * sizeof *f);
        if (!f) return NULL;
        m->fields = f;
        m->cap = cap;
    }
    sv_pb_field *f = &m->fields[m->n];
    memset(f, 0, sizeof *f);
    f->name = sv_strdup(name);
    if (!f->name) return NULL;
    f->line = line;
    m->n++;
    return f;
}

static sv_error *parse_fields(lexer *lx, sv_pb_msg *m, int depth, char close);

static sv_error *parse_message_value(lexer *lx, sv_pb_msg *parent, const char *name, int depth) {
    char close = lx->punct == '{' ? '}' : '>';
    if (depth + 1 > SV_PB_MAX_DEPTH) return lex_err(lx, "messages nest too deeply");
    sv_pb_field *f = add_field(parent, name, lx->tok_line);
    if (!f) return sv_err(500, "out of memory");
    f->kind = SV_PB_MESSAGE;
    f->msg = calloc(1, sizeof *f->msg);
    if (!f->msg) return sv_err(500, "out of memory");
    sv_pb_msg *child = f->msg; /* parent->fields may move while the child is parsed */
    sv_error *e = lex_next(lx);
    if (!e) e = parse_fields(lx, child, depth + 1, close);
    return e;
}

static sv_error *parse_scalar_value(lexer *lx, sv_pb_msg *parent, const char *name) {
    if (lx->kind != T_STRING && lx->kind != T_IDENT && lx->kind != T_NUMBER)
        return lex_err(lx, "expected a value");
    sv_pb_field *f = add_field(parent, name, lx->tok_line);
    if (!f) return sv_err(500, "out of memory");
    f->kind = lx->kind == T_STRING ? SV_PB_STRING : lx->kind == T_IDENT ? SV_PB_IDENT : SV_PB_NUMBER;
    f->len = lx->text.len;
    f->text = sv_strndup(lx->text.p ? lx->text.p : "", lx->text.len);
    if (!f->text) return sv_err(500, "out of memory");
    return lex_next(lx);
}

/* Parses fields until `close` (or EOF when close == 0); consumes the closing token. */
static sv_error *parse_fields(lexer *lx, sv_pb_msg *m, int depth, char close) {
    sv_error *e;
    for (;;) {
        if (close ? is_punct(lx, close) : lx->kind == T_EOF) return close ? lex_next(lx) : NULL;
        if (lx->kind == T_EOF) return lex_err(lx, "unexpected end of text (missing a closing bracket)");
        if (lx->kind != T_IDENT) return lex_err(lx, "expected a field name");
        if (++lx->n_fields > SV_PB_MAX_FIELDS) return lex_err(lx, "too many fields");
        char name[260];
        snprintf(name, sizeof name, "%s", lx->text.p);
        if ((e = lex_next(lx))) return e;
        bool colon = is_punct(lx, ':');
        if (colon && (e = lex_next(lx))) return e;
        if (is_punct(lx, '{') || is_punct(lx, '<')) {
            if ((e = parse_message_value(lx, m, name, depth))) return e;
        } else if (is_punct(lx, '[')) {
            if ((e = lex_next(lx))) return e;
            bool first = true;
            while (!is_punct(lx, ']')) {
                if (!first) {
                    if (!is_punct(lx, ',')) return lex_err(lx, "expected ',' or ']' in a list");
                    if ((e = lex_next(lx))) return e;
                }
                first = false;
                if (++lx->n_fields > SV_PB_MAX_FIELDS) return lex_err(lx, "too many fields");
                if (is_punct(lx, '{') || is_punct(lx, '<'))
                    e = parse_message_value(lx, m, name, depth);
                else
                    e = parse_scalar_value(lx, m, name);
                if (e) return e;
            }
            if ((e = lex_next(lx))) return e;
        } else {
            if (!colon) return lex_err(lx, "expected ':' after a field name");
            if ((e = parse_scalar_value(lx, m, name))) return e;
        }
        if (is_punct(lx, ',') || is_punct(lx, ';'))
            if ((e = lex_next(lx))) return e;
    }
}

sv_error *sv_pb_parse(const char *text, size_t len, const char *what, sv_pb_msg **out) {
    if (len > SV_PB_MAX_TEXT)
        return sv_err(400, "%s: %zu bytes is larger than the %u-byte limit", what, len,
                      SV_PB_MAX_TEXT);
    lexer lx = {.s = text, .len = len, .line = 1, .what = what};
    sv_pb_msg *m = calloc(1, sizeof *m);
    if (!m) return sv_err(500, "out of memory");
    sv_error *e = lex_next(&lx);
    if (!e) e = parse_fields(&lx, m, 0, 0);
    sv_buf_free(&lx.text);
    if (e) {
        sv_pb_free(m);
        return e;
    }
    *out = m;
    return NULL;
}

static void free_fields(sv_pb_msg *m) {
    for (size_t i = 0; i < m->n; i++) {
        free(m->fields[i].name);
        free(m->fields[i].text);
        sv_pb_free(m->fields[i].msg);
    }
    free(m->fields);
}

void sv_pb_free(sv_pb_msg *m) {
    if (!m) return;
    free_fields(m);
    free(m);
}

/* ---- JSON → tree ------------------------------------------------------------------------- */

typedef struct json_ctx {
    const char *what;
    size_t n_fields;
} json_ctx;

static sv_error *json_value(json_ctx *c, sv_pb_msg *m, const char *name, json_t *v, int depth,
                            bool in_array);

static bool is_map_field(const char *name) {
    return !strcmp(name, "parameters") || !strcmp(name, "priority_queue_policy");
}

static sv_error *json_object_fields(json_ctx *c, sv_pb_msg *m, json_t *obj, int depth) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        sv_error *e = json_value(c, m, key, v, depth, false);
        if (e) return e;
    }
    return NULL;
}

static sv_error *json_value(json_ctx *c, sv_pb_msg *m, const char *name, json_t *v, int depth,
                            bool in_array) {
    if (++c->n_fields > SV_PB_MAX_FIELDS) return sv_err(400, "%s: too many fields", c->what);
    if (strlen(name) > 256) return sv_err(400, "%s: a field name is too long", c->what);
    if (json_is_array(v)) {
        if (in_array) return sv_err(400, "%s: '%s': nested arrays are not allowed", c->what, name);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            sv_error *e = json_value(c, m, name, x, depth, true);
            if (e) return e;
        }
        return NULL;
    }
    if (json_is_object(v)) {
        if (depth + 1 > SV_PB_MAX_DEPTH) return sv_err(400, "%s: objects nest too deeply", c->what);
        sv_pb_field *f = NULL;
        if (is_map_field(name) && !json_object_get(v, "key")) {
            /* {"k1": V1, "k2": V2} → repeated {key: "k1" value: V1} */
            const char *key;
            json_t *val;
            json_object_foreach(v, key, val) {
                if (!(f = add_field(m, name, 0))) return sv_err(500, "out of memory");
                f->kind = SV_PB_MESSAGE;
                if (!(f->msg = calloc(1, sizeof *f->msg))) return sv_err(500, "out of memory");
                sv_pb_msg *entry = f->msg;
                sv_pb_field *k = add_field(entry, "key", 0);
                if (!k) return sv_err(500, "out of memory");
                k->kind = SV_PB_STRING;
                k->len = strlen(key);
                if (!(k->text = sv_strdup(key))) return sv_err(500, "out of memory");
                sv_error *e = json_value(c, entry, "value", val, depth + 1, false);
                if (e) return e;
            }
            return NULL;
        }
        if (!(f = add_field(m, name, 0))) return sv_err(500, "out of memory");
        f->kind = SV_PB_MESSAGE;
        if (!(f->msg = calloc(1, sizeof *f->msg))) return sv_err(500, "out of memory");
        return json_object_fields(c, f->msg, v, depth + 1);
    }
    sv_pb_field *f = add_field(m, name, 0);
    if (!f) return sv_err(500, "out of memory");
    char num[64];
    const char *text;
    size_t len;
    if (json_is_string(v)) {
        f->kind = SV_PB_STRING;
        text = json_string_value(v);
        len = json_string_length(v);
    } else if (json_is_integer(v)) {
        f->kind = SV_PB_NUMBER;
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        text = num;
        len = strlen(num);
    } else if (json_is_real(v)) {
        f->kind = SV_PB_NUMBER;
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        text = num;
        len = strlen(num);
    } else if (json_is_boolean(v)) {
        f->kind = SV_PB_IDENT;
        text = json_is_true(v) ? "true" : "false";
        len = strlen(text);
    } else {
        return sv_err(400, "%s: '%s' is null", c->what, name);
    }
    f->len = len;
    if (!(f->text = sv_strndup(text, len))) return sv_err(500, "out of memory");
    return NULL;
}

sv_error *sv_pb_from_json(const char *text, size_t len, const char *what, sv_pb_msg **out) {
    if (len > SV_PB_MAX_TEXT)
        return sv_err(400, "%s: %zu bytes is larger than the %u-byte limit", what, len,
                      SV_PB_MAX_TEXT);
    /* depth pre-check: jansson recurses; keep it shallow */
    if (sv_json_depth(text, len, 2 * SV_PB_MAX_DEPTH) > 2 * SV_PB_MAX_DEPTH)
        return sv_err(400, "%s: JSON nests too deeply", what);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return sv_err(400, "%s: invalid JSON at line %d: %s", what, jerr.line, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return sv_err(400, "%s: expected a JSON object", what);
    }
    sv_pb_msg *m = calloc(1, sizeof *m);
    json_ctx c = {what, 0};
    sv_error *e = m ? json_object_fields(&c, m, root, 0) : sv_err(500, "out of memory");
    json_decref(root);
    if (e) {
        sv_pb_free(m);
        return e;
    }
    *out = m;
    return NULL;
}

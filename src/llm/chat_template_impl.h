/* Chat templates: the internals of tdm_chat_render (include/tandem/tokenizer.h).
 *
 * A small interpreter for the Jinja subset Hugging Face chat templates use, rendered with
 * transformers' settings (trim_blocks, lstrip_blocks, no autoescape, a final newline of the
 * template dropped). Three parts:
 *   chat_template_parse.c  the lexer (text, tags, whitespace control) and a recursive
 *                          descent parser to a tree of statements and expressions;
 *   chat_template_eval.c   values with Python's semantics (str/int/bool/None/list/dict),
 *                          the statements and operators;
 *   chat_template_lib.c    filters, tests, string/dict methods and global functions.
 * Everything of one render lives in one arena (ct_ctx), freed at the end; the arena's size,
 * the output's size, the loop iterations and the nesting depth are capped so that a hostile
 * template ends with TDM_ERR_LIMIT instead of exhausting the machine.
 */
#ifndef TDM_LLM_CHAT_TEMPLATE_IMPL_H
#define TDM_LLM_CHAT_TEMPLATE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Limits of one render. */
#define CT_MAX_DEPTH 64                     /* nested expressions / statements / calls */
#define CT_MAX_ITERATIONS 1000000           /* loop iterations, all loops together */
#define CT_MAX_OUTPUT ((size_t)16 << 20)    /* bytes of rendered text (and of any string) */
#define CT_MAX_ARENA ((size_t)256 << 20)    /* bytes the render may allocate */
#define CT_MAX_EVAL_DEPTH 256               /* nested evaluation (chains such as a+b+c+...) */
#define CT_MAX_WORK ((size_t)1 << 28)       /* work units: bytes scanned or copied, and */
#define CT_WORK_CALL 16                     /* per expression evaluated / string appended */

/* ---- values ------------------------------------------------------------------------ */

typedef enum ct_kind {
    CV_UNDEF, /* a missing name / key / index: prints as "", false, iterates as empty */
    CV_NONE,
    CV_BOOL,
    CV_INT,
    CV_STR,
    CV_LIST,
    CV_DICT, /* also namespace() objects (ns = true: the only mutable values) */
    CV_LOOP, /* the `loop` variable of a for loop */
    CV_FUNC, /* a global function named as a value (undef_name holds the name): only for
              * `is defined` / `is callable`, as in `{% if strftime_now is defined %}` */
} ct_kind;

typedef struct ct_loop ct_loop;

typedef struct ct_value {
    ct_kind kind;
    bool ns;    /* a dict made by namespace() */
    bool tuple; /* a list that came from a tuple (prints as one) */
    union {
        bool b;
        int64_t i;
        struct {
            const char *s; /* UTF-8, not NUL-terminated */
            size_t len;
        } str;
        struct {
            struct ct_value **items;
            size_t n;
        } list;
        struct {
            struct ct_value **keys;
            struct ct_value **vals;
            size_t n, cap;
        } dict;
        ct_loop *loop;
        const char *undef_name; /* what was missing, for messages (may be NULL) */
    };
} ct_value;

struct ct_loop {
    ct_value **items;
    size_t n;   /* items after the loop's `if` filter */
    size_t pos; /* index0 of the current item */
};

/* ---- syntax tree ------------------------------------------------------------------- */

typedef enum ct_ekind {
    CE_LIT,    /* lit */
    CE_NAME,   /* name */
    CE_LIST,   /* args[0..n) */
    CE_DICT,   /* args: key, value, key, value... */
    CE_ATTR,   /* a.name */
    CE_ITEM,   /* a[b] */
    CE_SLICE,  /* a[b:c:d], each of b, c, d may be NULL */
    CE_CALL,   /* name(args) : a global function */
    CE_METHOD, /* a.name(args) */
    CE_FILTER, /* a | name(args) */
    CE_TEST,   /* a is [not] name(args) */
    CE_NEG,    /* -a */
    CE_NOT,    /* not a */
    CE_AND,
    CE_OR,
    CE_BIN,  /* a op b: op is one of "+", "-", "*", "/", "//", "%", "~" */
    CE_CMP,  /* a op b: "==", "!=", "<", ">", "<=", ">=", "in", "not in" */
    CE_COND, /* b if a else c (c may be NULL) */
} ct_ekind;

typedef struct ct_expr {
    ct_ekind kind;
    int line;
    const char *name; /* NAME, ATTR, CALL, METHOD, FILTER, TEST; the operator of BIN/CMP */
    bool negate;      /* TEST: `is not`; LIST: a tuple */
    struct ct_expr *a, *b, *c, *d;
    struct ct_expr **args; /* LIST, DICT, call arguments */
    const char **argnames; /* keyword names of call arguments (NULL = positional) */
    size_t n;
    ct_value *lit;
} ct_expr;

typedef enum ct_skind {
    CS_TEXT,     /* text, len */
    CS_OUT,      /* {{ expr }} */
    CS_IF,       /* if expr: body else orelse (elif = an IF alone in orelse) */
    CS_FOR,      /* for targets in expr [if filter]: body else orelse */
    CS_SET,      /* set target[.attr] = expr */
    CS_SETBLOCK, /* set target: body */
    CS_BLOCK,    /* body (transformers' {% generation %}) */
    CS_BREAK,
    CS_CONTINUE,
} ct_skind;

typedef struct ct_node ct_node;

typedef struct ct_block {
    ct_node **nodes;
    size_t n, cap;
} ct_block;

struct ct_node {
    ct_skind kind;
    int line;
    const char *text;
    size_t len;
    ct_expr *expr;
    ct_expr *filter;
    const char **targets; /* FOR: 1 or more names; SET: targets[0] */
    size_t n_targets;
    const char *attr; /* SET ns.attr */
    ct_block body, orelse;
};

/* ---- one render -------------------------------------------------------------------- */

typedef struct ct_chunk ct_chunk;

/* A growing string (malloc'd, capped at CT_MAX_OUTPUT). */
typedef struct ct_sb {
    char *s;
    size_t len, cap;
} ct_sb;

typedef struct ct_scope {
    struct ct_scope *parent;
    const char **names;
    ct_value **vals;
    size_t n, cap;
} ct_scope;

typedef struct ct_ctx {
    ct_chunk *chunks;
    size_t arena_used;
    tdm_status *err; /* the first error; every function fails once it is set */
    int depth;
    size_t iterations;
    size_t work;
    ct_scope *scope;
    ct_sb out; /* the rendered text */
    /* constants */
    ct_value *undef, *none, *vtrue, *vfalse, *empty_str;
} ct_ctx;

/* Arena: NULL (with ctx->err set) past CT_MAX_ARENA or when memory runs out. */
void *ct_alloc(ct_ctx *ctx, size_t size);
void ct_ctx_free(ct_ctx *ctx);
/* Sets ctx->err (the first one wins) and returns NULL, for `return ct_fail(...)`. */
void *ct_fail(ct_ctx *ctx, tdm_code code, int line, const char *fmt, ...) TDM_PRINTF(4, 5);
char *ct_strndup(ct_ctx *ctx, const char *s, size_t n);
/* Charges `units` of work (bytes scanned or copied); false (LIMIT) past CT_MAX_WORK, so that
 * a template that loops over big strings ends instead of running for hours. */
bool ct_work(ct_ctx *ctx, size_t units, int line);

/* Parser (chat_template_parse.c): the template's statements, or NULL with ctx->err. */
ct_block *ct_parse(ct_ctx *ctx, const char *src, size_t len);

/* Values (chat_template_eval.c). */
ct_value *ct_str(ct_ctx *ctx, const char *s, size_t len); /* copies */
ct_value *ct_str_own(ct_ctx *ctx, const char *s, size_t len); /* s is in the arena */
ct_value *ct_int(ct_ctx *ctx, int64_t i);
ct_value *ct_bool(ct_ctx *ctx, bool b);
ct_value *ct_list(ct_ctx *ctx, size_t n); /* n NULL items to fill */
ct_value *ct_dict(ct_ctx *ctx);
bool ct_dict_set(ct_ctx *ctx, ct_value *dict, ct_value *key, ct_value *val);
ct_value *ct_dict_get(const ct_value *dict, const char *key, size_t len);
bool ct_truthy(const ct_value *v);
bool ct_equal(const ct_value *a, const ct_value *b);
const char *ct_kind_name(const ct_value *v);
/* Python's str(v) (repr for items of lists and dicts). */
ct_value *ct_to_str(ct_ctx *ctx, const ct_value *v);
/* Items of a list, characters of a string, keys of a dict; NULL (error) otherwise. */
ct_value **ct_iterate(ct_ctx *ctx, ct_value *v, size_t *n, int line);
ct_value *ct_eval(ct_ctx *ctx, const ct_expr *e);
/* Renders the statements to ctx->out: CT_NEXT, CT_BREAK or CT_CONTINUE from a loop
 * control statement, CT_ERROR with ctx->err. */
enum { CT_ERROR = -1, CT_NEXT = 0, CT_BREAK = 1, CT_CONTINUE = 2 };
int ct_exec(ct_ctx *ctx, const ct_block *block);
bool ct_sb_put(ct_ctx *ctx, ct_sb *sb, const char *s, size_t n);
/* The builder's text as a string value (in the arena); frees the builder. */
ct_value *ct_sb_finish(ct_ctx *ctx, ct_sb *sb);
/* Appends Python's repr(v) (str(v) for everything but strings). */
bool ct_put_repr(ct_ctx *ctx, ct_sb *sb, const ct_value *v, int depth);
bool ct_scope_set(ct_ctx *ctx, ct_scope *scope, const char *name, ct_value *val);
/* The first occurrence of n in h (NULL: none, or an error when ctx->err is set), with the
 * bytes it looked at charged as work. */
const char *ct_search(ct_ctx *ctx, const char *h, size_t hl, const char *n, size_t nl, int line);
/* Python's compare for < > <= >=: -1/0/1, or 2 (error set) for types that do not order. */
int ct_order(ct_ctx *ctx, const ct_value *a, const ct_value *b, const char *op, int line);
/* The `in` operator: needle in haystack; -1 with the error set. */
int ct_contains(ct_ctx *ctx, const ct_value *hay, const ct_value *needle, int line);
/* Python's getitem with Jinja's fallbacks (missing -> undefined). */
ct_value *ct_getitem(ct_ctx *ctx, ct_value *obj, ct_value *key, int line);

/* Library (chat_template_lib.c): e has kind CE_CALL / CE_METHOD / CE_FILTER / CE_TEST;
 * `self` is the evaluated object (NULL for CALL); args are evaluated here. */
ct_value *ct_call(ct_ctx *ctx, const ct_expr *e);
/* Whether `name` is one of the global functions ct_call knows. */
bool ct_is_function(const char *name);
ct_value *ct_method(ct_ctx *ctx, const ct_expr *e, ct_value *self);
ct_value *ct_filter(ct_ctx *ctx, const ct_expr *e, ct_value *self);
ct_value *ct_test(ct_ctx *ctx, const ct_expr *e, ct_value *self);

/* UTF-8 (the template and messages are validated first). */
size_t ct_utf8_count(const char *s, size_t len);
/* Byte offset of code point `index` (clamped to len). */
size_t ct_utf8_offset(const char *s, size_t len, size_t index);
/* Python's str.isspace for the code point at s (sets *n to its byte length). */
bool ct_is_space(const char *s, size_t len, size_t *n);
bool ct_utf8_valid(const char *s, size_t len);
/* Writes code point cp as UTF-8 (1 to 4 bytes); returns the length. */
size_t ct_utf8_put(char *d, uint32_t cp);

#endif

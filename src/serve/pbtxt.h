/*
 * A small, strict, bounded reader for the protobuf text format subset that Triton model
 * configurations use (config.pbtxt), and the same tree built from a JSON object (the
 * "config" override of a repository load request).
 *
 *     name: "resnet"                       scalar field
 *     dims: [ 3, 224, 224 ]                repeated scalars
 *     input [ { name: "x" }, { ... } ]     repeated messages ("input: [...]" too)
 *     dynamic_batching { }                 message ("field: { }" and "field < >" too)
 *     kind: KIND_CPU                       enum value (identifier)
 *     # comment
 *
 * Strings are "..." or '...' with C escapes (\n \t \\ \" \' \xHH \ooo); adjacent strings
 * concatenate. Field separators ',' and ';' are optional. Limits: the text is at most
 * SV_PB_MAX_TEXT bytes, messages nest at most SV_PB_MAX_DEPTH deep, at most SV_PB_MAX_FIELDS
 * fields in all, a string or number token at most SV_PB_MAX_TOKEN bytes. Errors name the line.
 *
 * The tree keeps fields in order; a repeated field is several fields with the same name.
 */
#ifndef TDM_SERVE_PBTXT_H
#define TDM_SERVE_PBTXT_H

#include "serve/sv.h"

#define SV_PB_MAX_TEXT (1u << 20)
#define SV_PB_MAX_DEPTH 16
#define SV_PB_MAX_FIELDS 20000
#define SV_PB_MAX_TOKEN 65536

typedef enum sv_pb_kind {
    SV_PB_STRING,  /* "quoted" */
    SV_PB_IDENT,   /* enum value, true/false, inf, nan */
    SV_PB_NUMBER,  /* integer or float literal, as written */
    SV_PB_MESSAGE, /* nested message */
} sv_pb_kind;

typedef struct sv_pb_msg sv_pb_msg;

typedef struct sv_pb_field {
    char *name;
    sv_pb_kind kind;
    char *text;     /* for scalars (NUL-terminated; strings may contain NUL: see len) */
    size_t len;     /* byte length of text */
    sv_pb_msg *msg; /* for SV_PB_MESSAGE */
    int line;
} sv_pb_field;

struct sv_pb_msg {
    sv_pb_field *fields;
    size_t n, cap;
};

/* Parses text (not necessarily NUL-terminated). On error returns a 400 error naming the
 * line. `what` names the source in messages (e.g. "resnet/config.pbtxt"). */
sv_error *sv_pb_parse(const char *text, size_t len, const char *what, sv_pb_msg **out);
/* Builds the tree from a JSON object text (objects → messages, arrays → repeated fields,
 * numbers/bools → scalars). Map fields written as JSON objects ({"key": {...}}) become
 * repeated {key, value} messages, as in the text format. */
sv_error *sv_pb_from_json(const char *text, size_t len, const char *what, sv_pb_msg **out);
void sv_pb_free(sv_pb_msg *m);

#endif

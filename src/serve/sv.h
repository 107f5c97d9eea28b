/*
 * tandem serve: shared pieces of the inference server (byte buffers, errors with an HTTP
 * status, clocks, data-type names). The server uses tandem's public API only.
 *
 * Errors: functions that can fail on client input or on a model return `sv_error *`; NULL
 * means success. An error carries the HTTP status to answer with and a message; the caller
 * frees it with sv_error_free(). Out-parameters are untouched on failure.
 */
#ifndef TDM_SERVE_SV_H
#define TDM_SERVE_SV_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

/* ---- errors ---------------------------------------------------------------------------- */

typedef struct sv_error {
    int http;  /* 400, 404, 405, 413, 415, 500, 501, 503 */
    char *msg; /* stored with the error */
} sv_error;

sv_error *sv_err(int http, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Converts a tandem status (and frees it) into an error with `http`, prefixed by `context`. */
sv_error *sv_err_status(int http, tdm_status *st, const char *context);
void sv_error_free(sv_error *e);

/* ---- growable byte buffer ---------------------------------------------------------------- */

typedef struct sv_buf {
    char *p;
    size_t len, cap;
    bool oom; /* sticky: an append failed; the content is then incomplete */
} sv_buf;

bool sv_buf_reserve(sv_buf *b, size_t extra);
void sv_buf_add(sv_buf *b, const void *data, size_t n);
void sv_buf_str(sv_buf *b, const char *s);
void sv_buf_printf(sv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a JSON string literal (quotes included). Valid UTF-8 is copied as it is, any
 * other byte >= 0x80 becomes U+FFFD (the result is always valid JSON; callers that must not
 * alter data check sv_utf8_valid first); control characters are escaped. */
void sv_buf_json_str(sv_buf *b, const char *s, size_t n);
/* Detaches the content (NUL-terminated); the buffer becomes empty. NULL if oom. */
char *sv_buf_take(sv_buf *b, size_t *len);
void sv_buf_free(sv_buf *b);

/* ---- clocks ------------------------------------------------------------------------------ */

uint64_t sv_now_ns(void);     /* monotonic */
uint64_t sv_wall_ms(void);    /* milliseconds since the epoch */

/* ---- data types -------------------------------------------------------------------------- */

/* KServe v2 names: "FP32", "INT64", "BYTES", ... TDM_UNDEFINED when unknown. */
tdm_dtype sv_dtype_from_v2(const char *name);
const char *sv_dtype_v2_name(tdm_dtype dtype);           /* "" if none */
/* Triton model configuration names: "TYPE_FP32", "TYPE_STRING", ... */
tdm_dtype sv_dtype_from_config(const char *name);
const char *sv_dtype_config_name(tdm_dtype dtype);       /* "TYPE_INVALID" if none */
/* Bytes per element on the wire; 0 for BYTES (variable) and unsupported types. */
size_t sv_dtype_wire_size(tdm_dtype dtype);

uint16_t sv_float_to_half(float f);
float sv_half_to_float(uint16_t h);
uint16_t sv_float_to_bf16(float f);
float sv_bf16_to_float(uint16_t h);

/* ---- misc -------------------------------------------------------------------------------- */

char *sv_strdup(const char *s);
char *sv_strndup(const char *s, size_t n);
/* Strict decimal int64 parse of the whole string. */
bool sv_parse_i64(const char *s, int64_t *out);
/* Element count of a shape with overflow checks; false on overflow or a negative dim. */
bool sv_shape_count(int rank, const int64_t *dims, int64_t *count);
/* Nesting depth of brackets and braces in JSON text (outside strings); stops counting once
 * it passes `limit`. A cheap guard before handing text to a recursive parser. */
int sv_json_depth(const char *s, size_t n, int limit);
/* Whether [s, s+n) is valid UTF-8. */
bool sv_utf8_valid(const char *s, size_t n);

#endif

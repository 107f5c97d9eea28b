/*
 * One inference request as it travels from the HTTP layer (infer.c parses it) through the
 * scheduler (sched.c queues, batches and runs it) back to the HTTP layer (which answers).
 *
 * Ownership: the HTTP layer allocates the request and frees it with sv_request_free() after
 * the answer is queued. The scheduler never frees a request: it fills the answer
 * (http/resp/resp_len/json_len) through sv_infer_respond()/sv_infer_fail() and calls
 * notify() exactly once, from one of its threads.
 */
#ifndef TDM_SERVE_REQUEST_H
#define TDM_SERVE_REQUEST_H

#include "serve/config.h"

typedef struct sv_version sv_version;

/* One input tensor in wire form: little-endian elements, or for BYTES a sequence of
 * 4-byte little-endian lengths each followed by that many bytes. */
typedef struct sv_in {
    int cfg;   /* index into the model config's inputs */
    tdm_dtype dtype;
    int rank;  /* as sent, with the batch dimension when the model batches */
    int64_t dims[TDM_MAX_RANK];
    int64_t count;
    const uint8_t *data;
    size_t nbytes;
    uint8_t *owned; /* decoded from JSON: freed with the request */
} sv_in;

typedef struct sv_out {
    int cfg;     /* index into the model config's outputs */
    bool binary; /* answer with binary data */
} sv_out;

/* One output of a finished run, restricted to one request's part of the batch. */
typedef struct sv_slice {
    tdm_dtype dtype;
    int rank;
    int64_t dims[TDM_MAX_RANK];
    int64_t count;
    const void *data; /* elements, or for STRING `const char *const *` */
} sv_slice;

typedef struct sv_request {
    sv_version *ver;    /* referenced (sv_version_ref) while the request lives */
    const sv_model_config *cfg;
    char *id;           /* the request's "id", or NULL */
    int n_in;
    sv_in *in;          /* sorted by cfg index */
    int n_out;          /* 0 = every output */
    sv_out *out;
    bool binary_default; /* "binary_data_output": true */
    int64_t batch;      /* batch elements (dim 0), 1 when the model does not batch */
    uint32_t priority;  /* as asked; 0 = the default level */
    uint64_t timeout_us; /* as asked; 0 = none */
    char *body;         /* the request body; inputs may point into it */
    size_t body_len;
    bool gzip_ok, deflate_ok; /* Accept-Encoding */

    /* scheduling (sched.c). t_deadline: when the request times out (the "timeout" parameter
     * or the queue policy's default), in the queue and while its batch runs; 0 = never */
    uint64_t t_recv, t_enqueue, t_deadline;
    uint64_t seq;
    uint32_t level;
    bool delayed, done;
    struct sv_request *next, *ord_next;

    /* the answer */
    int http;
    char *resp;
    size_t resp_len;
    size_t json_len;    /* with binary outputs: the JSON header's length; else 0 */
    void (*notify)(struct sv_request *r, void *user);
    void *notify_user;
    /* Optional (NULL when no client can go away): whether the client that waits for the
     * answer has gone (closed its connection). The scheduler calls it, with its lock held and
     * only while the request is queued (before notify), to drop requests nobody waits for;
     * it must be quick and must not block. */
    bool (*gone)(struct sv_request *r, void *user); /* user: notify_user */
} sv_request;

/* Reads the Inference-Header-Content-Length header: `value` as sent (NULL when absent, then
 * *header_len = -1). 400 unless a non-negative decimal integer. */
sv_error *sv_infer_header_len(const char *value, int64_t *header_len);

/* The bytes of an inference request's JSON header [body, body + jlen) that jansson reads:
 * all but the tensors' "data" arrays of numbers and booleans, which are decoded straight into
 * the tensors (the intermediate memory is the tensor itself). */
size_t sv_infer_tree_len(const char *body, size_t jlen);
/* Parses an inference request body (a pure function of its arguments: no server needed;
 * tests/fuzz/fuzz_infer_*.c call it directly). `header_len` is the
 * Inference-Header-Content-Length value (-1 when absent). Takes ownership of body (malloc'd)
 * on success and failure. `ver` is only stored in the request (may be NULL). */
sv_error *sv_infer_parse(sv_version *ver, const sv_model_config *cfg, char *body, size_t len,
                         int64_t header_len, sv_request **out);
/* Fills the answer from one request's slices of the outputs (one per config output). */
void sv_infer_respond(sv_request *r, const char *model_name, const char *version,
                      const sv_slice *slices);
/* Fills an error answer. Frees e. */
void sv_infer_fail(sv_request *r, sv_error *e);
void sv_request_free(sv_request *r);

#endif

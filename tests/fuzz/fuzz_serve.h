/* Shared by the server fuzz targets (fuzz_infer_json, fuzz_infer_binary): model
 * configurations to parse requests against, and a check of what the request parser accepts.
 *
 * The configurations are Triton config.pbtxt texts, read with the server's own
 * sv_config_parse once per process. Each has one output per input, of the same type, so that
 * an accepted request can be answered as if by an identity model: sv_infer_respond then runs
 * on the parsed inputs (JSON and binary answers, BYTES decoding, UTF-8 checks). */
#ifndef TDM_FUZZ_SERVE_H
#define TDM_FUZZ_SERVE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/request.h"

/* The request's first byte picks one (modulo the count). */
static const char *const fzs_config_text[] = {
    /* identity_fp32 of tests/server/test_server.py */
    "name: \"identity_fp32\"\nmax_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n",
    /* identity_bytes */
    "name: \"identity_bytes\"\nmax_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_STRING dims: [ 2 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_STRING dims: [ 2 ] } ]\n",
    /* no batching; every wire type; dynamic dims; an optional input */
    "name: \"types\"\nmax_batch_size: 0\n"
    "input [\n"
    "  { name: \"i64\" data_type: TYPE_INT64 dims: [ -1 ] },\n"
    "  { name: \"b\" data_type: TYPE_BOOL dims: [ 2, 2 ] },\n"
    "  { name: \"h\" data_type: TYPE_FP16 dims: [ 3 ] },\n"
    "  { name: \"u8\" data_type: TYPE_UINT8 dims: [ -1, -1 ] },\n"
    "  { name: \"i8\" data_type: TYPE_INT8 dims: [ 4 ] optional: true },\n"
    "  { name: \"bf\" data_type: TYPE_BF16 dims: [ 2 ] optional: true },\n"
    "  { name: \"f64\" data_type: TYPE_FP64 dims: [ 1 ] optional: true },\n"
    "  { name: \"u64\" data_type: TYPE_UINT64 dims: [ 2 ] optional: true },\n"
    "  { name: \"i32\" data_type: TYPE_INT32 dims: [ -1 ] optional: true },\n"
    "  { name: \"i16\" data_type: TYPE_INT16 dims: [ 2 ] optional: true },\n"
    "  { name: \"u16\" data_type: TYPE_UINT16 dims: [ 2 ] optional: true },\n"
    "  { name: \"u32\" data_type: TYPE_UINT32 dims: [ 2 ] optional: true },\n"
    "  { name: \"s\" data_type: TYPE_STRING dims: [ -1 ] optional: true }\n"
    "]\n"
    "output [\n"
    "  { name: \"o_i64\" data_type: TYPE_INT64 dims: [ -1 ] },\n"
    "  { name: \"o_b\" data_type: TYPE_BOOL dims: [ 2, 2 ] },\n"
    "  { name: \"o_h\" data_type: TYPE_FP16 dims: [ 3 ] },\n"
    "  { name: \"o_u8\" data_type: TYPE_UINT8 dims: [ -1, -1 ] },\n"
    "  { name: \"o_i8\" data_type: TYPE_INT8 dims: [ 4 ] },\n"
    "  { name: \"o_bf\" data_type: TYPE_BF16 dims: [ 2 ] },\n"
    "  { name: \"o_f64\" data_type: TYPE_FP64 dims: [ 1 ] },\n"
    "  { name: \"o_u64\" data_type: TYPE_UINT64 dims: [ 2 ] },\n"
    "  { name: \"o_i32\" data_type: TYPE_INT32 dims: [ -1 ] },\n"
    "  { name: \"o_i16\" data_type: TYPE_INT16 dims: [ 2 ] },\n"
    "  { name: \"o_u16\" data_type: TYPE_UINT16 dims: [ 2 ] },\n"
    "  { name: \"o_u32\" data_type: TYPE_UINT32 dims: [ 2 ] },\n"
    "  { name: \"o_s\" data_type: TYPE_STRING dims: [ -1 ] }\n"
    "]\n",
    /* two batched inputs (the batch sizes must agree), one of them BYTES */
    "name: \"pair\"\nmax_batch_size: 4\n"
    "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ -1, 2 ] },\n"
    "        { name: \"tag\" data_type: TYPE_STRING dims: [ 1 ] } ]\n"
    "output [ { name: \"y\" data_type: TYPE_FP32 dims: [ -1, 2 ] },\n"
    "         { name: \"tag_out\" data_type: TYPE_STRING dims: [ 1 ] } ]\n",
};
#define FZS_N_CONFIGS (sizeof fzs_config_text / sizeof *fzs_config_text)

static sv_model_config *fzs_configs[FZS_N_CONFIGS];

static const sv_model_config *fzs_config(uint8_t pick) {
    size_t k = pick % FZS_N_CONFIGS;
    if (!fzs_configs[k]) {
        const char *t = fzs_config_text[k];
        const char *q = strchr(t, '"') + 1;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(strchr(q, '"') - q), q);
        sv_error *e = sv_config_parse(t, strlen(t), false, name, &fzs_configs[k]);
        if (e) {
            fprintf(stderr, "fuzz: built-in config %zu: %s\n", k, e->msg);
            abort();
        }
    }
    return fzs_configs[k];
}

static void fzs_check_error(sv_error *e) {
    if (!e->msg || !e->msg[0] || e->http < 400 || e->http > 599) {
        fprintf(stderr, "fuzz: malformed error (%d)\n", e->http);
        abort();
    }
    if (getenv("TDM_FUZZ_VERBOSE")) fprintf(stderr, "[%d] %s\n", e->http, e->msg);
    sv_error_free(e);
}

/* Checks an accepted request against its config, reads every input byte, and answers it
 * as an identity model would. */
static void fzs_accepted(sv_request *r) {
    const sv_model_config *cfg = r->cfg;
    volatile uint8_t sink = 0;
    sv_slice *slices = calloc((size_t)cfg->n_outputs + 1, sizeof *slices);
    char **strs[SV_MAX_IO] = {0};
    void *copies[SV_MAX_IO] = {0};
    if (!slices) abort();
    for (int k = 0; k < cfg->n_outputs; k++) slices[k].dtype = cfg->outputs[k].dtype;
    for (int i = 0; i < r->n_in; i++) {
        const sv_in *x = &r->in[i];
        if (x->cfg < 0 || x->cfg >= cfg->n_inputs || x->dtype != cfg->inputs[x->cfg].dtype) abort();
        size_t esz = sv_dtype_wire_size(x->dtype);
        if (esz && (x->count < 0 || x->nbytes != (size_t)x->count * esz)) abort();
        for (size_t b = 0; b < x->nbytes; b++) sink ^= x->data[b];
        sv_slice *s = &slices[x->cfg];
        s->rank = x->rank;
        memcpy(s->dims, x->dims, sizeof s->dims);
        s->count = x->count;
        /* as the scheduler does: the elements go into a (aligned) tensor of their own */
        copies[x->cfg] = malloc(x->nbytes + 1);
        if (!copies[x->cfg]) abort();
        if (x->nbytes) memcpy(copies[x->cfg], x->data, x->nbytes);
        s->data = copies[x->cfg];
        if (x->dtype == TDM_STRING) { /* wire form -> C strings, as a STRING tensor holds */
            char **v = calloc((size_t)x->count + 1, sizeof *v);
            if (!v) abort();
            size_t pos = 0;
            for (int64_t e = 0; e < x->count; e++) {
                uint32_t n;
                if (x->nbytes - pos < 4) abort();
                memcpy(&n, x->data + pos, 4);
                pos += 4;
                if (n > x->nbytes - pos) abort();
                v[e] = malloc((size_t)n + 1);
                if (!v[e]) abort();
                memcpy(v[e], x->data + pos, n);
                v[e][n] = 0;
                pos += n;
            }
            if (pos != x->nbytes) abort();
            strs[x->cfg] = v;
            s->data = v;
        }
    }
    (void)sink;
    sv_infer_respond(r, cfg->name, "1", slices);
    if (!r->resp || r->http < 200 || r->http > 599 || r->json_len > r->resp_len) abort();
    for (int k = 0; k < cfg->n_outputs; k++) {
        free(copies[k]);
        if (!strs[k]) continue;
        for (int64_t e = 0; e < slices[k].count; e++) free(strs[k][e]);
        free(strs[k]);
    }
    free(slices);
}

/* Parses one request body (copied: the parser takes ownership) against config `pick`. */
static void fzs_parse(uint8_t pick, const uint8_t *body, size_t len, int64_t header_len) {
    const sv_model_config *cfg = fzs_config(pick);
    char *copy = malloc(len + 1);
    if (!copy) abort();
    if (len) memcpy(copy, body, len);
    copy[len] = 0; /* the server's body buffer is NUL-terminated too (sv_buf_take) */
    sv_request *r = NULL;
    sv_error *e = sv_infer_parse(NULL, cfg, copy, len, header_len, &r);
    if (e) {
        fzs_check_error(e);
        return;
    }
    fzs_accepted(r);
    sv_request_free(r);
}

#endif

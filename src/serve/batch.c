/* tandem serve: one batch of requests run as one tandem run (see batch.h). */
#include <stdlib.h>
#include <string.h>

#include "serve/batch.h"

/* Builds one input tensor for the batch; *buf receives memory to free after the tensor
 * (NULL when the tensor owns its memory). */
static sv_error *make_input(const sv_batch_ctx *s, sv_request **b, int n, int64_t items, int j,
                            tdm_tensor **out, void **buf) {
    const sv_in *first = &b[0]->in[j];
    const sv_io_config *io = &s->cfg->inputs[first->cfg];
    int bd = s->cfg->max_batch_size > 0 ? 1 : 0;
    int rank;
    int64_t dims[TDM_MAX_RANK];
    if (io->has_reshape) {
        rank = io->reshape_rank + bd;
        if (bd) dims[0] = items;
        for (int k = 0; k < io->reshape_rank; k++) dims[k + bd] = io->reshape[k];
        int64_t cnt, want = 0;
        for (int i = 0; i < n; i++) want += b[i]->in[j].count;
        /* one -1 in the reshape takes what is left */
        int unknown = -1;
        int64_t known = 1;
        for (int k = 0; k < rank; k++) {
            if (dims[k] < 0) unknown = k;
            else known *= dims[k];
        }
        if (unknown >= 0 && known > 0 && want % known == 0) dims[unknown] = want / known;
        if (!sv_shape_count(rank, dims, &cnt) || cnt != want)
            return sv_err(400, "input '%s': the reshape in the config does not fit the input's "
                          "%lld elements", io->name, (long long)want);
    } else {
        rank = first->rank;
        memcpy(dims, first->dims, sizeof dims);
        if (bd) dims[0] = items;
    }
    tdm_tensor *t = NULL;
    tdm_status *st = NULL;
    *buf = NULL;
    if (first->dtype != TDM_STRING) {
        /* the requests' bytes go into uninitialised memory that the tensor wraps (a created
         * tensor would be zeroed first, only to be overwritten) */
        int64_t cnt;
        size_t esz = tdm_dtype_size(first->dtype), nbytes;
        if (!sv_shape_count(rank, dims, &cnt) || esz == 0 || (uint64_t)cnt > SIZE_MAX / esz)
            return sv_err(500, "input '%s': the batch is too large", io->name);
        nbytes = (size_t)cnt * esz;
        size_t cap = (nbytes + 63) & ~(size_t)63;
        *buf = aligned_alloc(64, cap ? cap : 64);
        if (!*buf) return sv_err(500, "out of memory");
        st = tdm_tensor_wrap(s->env, first->dtype, rank, dims, *buf, nbytes, &t);
    } else {
        st = tdm_tensor_create(s->env, first->dtype, rank, dims, &t);
    }
    if (st) {
        free(*buf);
        *buf = NULL;
        return sv_err_status(500, st, io->name);
    }
    if (first->dtype == TDM_STRING) {
        int64_t idx = 0;
        for (int i = 0; i < n && !st; i++) {
            const sv_in *x = &b[i]->in[j];
            size_t pos = 0;
            for (int64_t e = 0; e < x->count && !st; e++) {
                uint32_t len;
                memcpy(&len, x->data + pos, 4); /* checked when parsed */
                st = tdm_tensor_set_string(t, idx++, (const char *)x->data + pos + 4, len);
                pos += 4 + (size_t)len;
            }
        }
        if (st) {
            tdm_tensor_free(t);
            return sv_err_status(500, st, io->name);
        }
    } else {
        char *dst = tdm_tensor_data(t);
        size_t off = 0, cap = tdm_tensor_byte_size(t);
        for (int i = 0; i < n; i++) {
            const sv_in *x = &b[i]->in[j];
            if (x->nbytes > cap - off) {
                tdm_tensor_free(t);
                free(*buf);
                *buf = NULL;
                return sv_err(500, "input '%s': sizes do not add up", io->name);
            }
            memcpy(dst + off, x->data, x->nbytes);
            off += x->nbytes;
        }
        if (off != cap) { /* every byte of the wrapped memory must come from a request */
            tdm_tensor_free(t);
            free(*buf);
            *buf = NULL;
            return sv_err(500, "input '%s': sizes do not add up", io->name);
        }
        if (first->dtype == TDM_BOOL) /* binary data may hold any byte: make it a valid bool */
            for (size_t i = 0; i < off; i++) dst[i] = dst[i] != 0;
    }
    *out = t;
    return NULL;
}

/* The run's timeout in ms: until the latest deadline among the batch's requests, rounded up;
 * 0 when one of them has no deadline; -1 when every deadline has passed already. */
static int64_t batch_timeout_ms(sv_request **b, int n, uint64_t now) {
    uint64_t latest = 0;
    for (int i = 0; i < n; i++) {
        if (!b[i]->t_deadline) return 0;
        if (b[i]->t_deadline > latest) latest = b[i]->t_deadline;
    }
    if (latest <= now) return -1;
    return (int64_t)((latest - now + 999999) / 1000000);
}

sv_error *sv_batch_run(const sv_batch_ctx *s, sv_request **b, int n, int64_t items, uint64_t t[4],
                       bool *timed_out) {
    const sv_model_config *cfg = s->cfg;
    int n_in = b[0]->n_in, n_out = cfg->n_outputs;
    const char **in_names = calloc((size_t)n_in + 1, sizeof *in_names);
    const char **out_names = calloc((size_t)n_out + 1, sizeof *out_names);
    tdm_tensor **ins = calloc((size_t)n_in + 1, sizeof *ins);
    void **bufs = calloc((size_t)n_in + 1, sizeof *bufs);
    tdm_tensor **outs = calloc((size_t)n_out + 1, sizeof *outs);
    sv_slice *slices = calloc((size_t)n_out + 1, sizeof *slices);
    sv_error *e = NULL;
    if (!in_names || !out_names || !ins || !bufs || !outs || !slices) e = sv_err(500, "out of memory");
    for (int j = 0; !e && j < n_in; j++) {
        in_names[j] = cfg->inputs[b[0]->in[j].cfg].name;
        e = make_input(s, b, n, items, j, &ins[j], &bufs[j]);
    }
    t[1] = sv_now_ns();
    *timed_out = false;
    if (!e) {
        for (int k = 0; k < n_out; k++) out_names[k] = cfg->outputs[k].name;
        tdm_run_options ro = {sizeof ro, batch_timeout_ms(b, n, t[1])};
        tdm_status *st = NULL;
        if (ro.timeout_ms < 0)
            *timed_out = true; /* expired between the batcher and here: do not start */
        else
            st = tdm_session_run_ex(s->session, (size_t)n_in, in_names, (const tdm_tensor *const *)ins,
                                    (size_t)n_out, out_names, &ro, outs);
        if (st && tdm_status_code(st) == TDM_ERR_CANCELLED) { /* only deadlines cancel runs here */
            tdm_status_free(st);
            st = NULL;
            *timed_out = true;
        }
        if (*timed_out) e = sv_err(503, SV_TIMEOUT_MSG);
        else if (st) e = sv_err_status(tdm_status_code(st) == TDM_ERR_INVALID_ARGUMENT ? 400 : 500, st,
                                       "inference failed");
    }
    t[2] = sv_now_ns();
    int bd = cfg->max_batch_size > 0 ? 1 : 0;
    for (int k = 0; !e && k < n_out; k++) {
        int r = tdm_tensor_rank(outs[k]);
        const int64_t *d = tdm_tensor_dims(outs[k]);
        if (bd && (r < 1 || d[0] != items))
            e = sv_err(500, "model output '%s' has shape with first dimension %lld, but the "
                       "batch has %lld elements", cfg->outputs[k].name, r ? (long long)d[0] : 0ll,
                       (long long)items);
    }
    int64_t off = 0;
    for (int i = 0; !e && i < n; i++) {
        for (int k = 0; k < n_out; k++) {
            sv_slice *sl = &slices[k];
            const tdm_tensor *o = outs[k];
            sl->dtype = tdm_tensor_dtype(o);
            sl->rank = tdm_tensor_rank(o);
            memcpy(sl->dims, tdm_tensor_dims(o), (size_t)sl->rank * sizeof(int64_t));
            int64_t per = 1; /* elements per batch item */
            for (int q = bd; q < sl->rank; q++) per *= sl->dims[q];
            if (bd) sl->dims[0] = b[i]->batch;
            sl->count = bd ? per * b[i]->batch : tdm_tensor_element_count(o);
            size_t esz = sl->dtype == TDM_STRING ? sizeof(char *) : tdm_dtype_size(sl->dtype);
            sl->data = (const char *)tdm_tensor_data_const(o) + (size_t)(off * per) * esz;
            const sv_io_config *io = &cfg->outputs[k];
            if (io->has_reshape && io->rank >= 0) { /* answer in the config's dims */
                int64_t want;
                int64_t dd[TDM_MAX_RANK];
                dd[0] = b[i]->batch;
                for (int q = 0; q < io->rank; q++) dd[q + bd] = io->dims[q];
                if (sv_shape_count(io->rank + bd, dd, &want) && want == sl->count) {
                    sl->rank = io->rank + bd;
                    memcpy(sl->dims, dd, sizeof dd);
                }
            }
        }
        sv_infer_respond(b[i], s->model_name, s->version, slices);
        off += b[i]->batch;
    }
    t[3] = sv_now_ns();
    for (int j = 0; ins && j < n_in; j++) tdm_tensor_free(ins[j]);
    for (int j = 0; bufs && j < n_in; j++) free(bufs[j]);
    free(bufs);
    for (int k = 0; outs && k < n_out; k++) tdm_tensor_free(outs[k]);
    free(in_names);
    free(out_names);
    free(ins);
    free(outs);
    free(slices);
    return e;
}

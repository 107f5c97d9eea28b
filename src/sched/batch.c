/* Batches along the leading dim (sched/batch.h). */
#include "sched/batch.h"

#include <string.h>

bool tdm_batch_splittable(const tdm_graph *g) {
    size_t dyn_inputs = 0;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_value *v = &g->values[g->inputs[i]];
        if (v->data) continue;
        if (v->rank < 1 || v->dims[0] >= 0) return false;
        dyn_inputs++;
    }
    for (size_t o = 0; o < g->n_outputs; o++) {
        const tdm_value *v = &g->values[g->outputs[o]];
        if (v->rank < 1 || v->dims[0] >= 0) return false;
    }
    return dyn_inputs > 0;
}

int64_t tdm_batch_rows(const tdm_graph *g, const tdm_tensor *const *by_input) {
    int64_t n = -1;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_tensor *t = by_input[i];
        if (!t && g->values[g->inputs[i]].data) continue;
        if (!t || t->rank < 1 || tdm_dtype_has_ptrs(t->dtype) || t->device) return -1;
        if (n >= 0 && t->dims[0] != n) return -1;
        n = t->dims[0];
    }
    return n;
}

tdm_status *tdm_batch_slice(const tdm_allocator *a, const tdm_tensor *t, int64_t begin,
                            int64_t count, tdm_tensor **out) {
    int64_t dims[TDM_MAX_RANK];
    memcpy(dims, t->dims, sizeof dims);
    dims[0] = count;
    size_t row = t->dims[0] ? t->nbytes / (size_t)t->dims[0] : 0;
    return tdm_tensor_new_view(a, t->dtype, t->rank, dims, (char *)t->data + (size_t)begin * row, out);
}

tdm_status *tdm_batch_join(const tdm_allocator *a, const tdm_tensor *const *parts, int np,
                           const int64_t *rows, const char *name, tdm_tensor **out) {
    const tdm_tensor *f0 = np > 0 ? parts[0] : NULL;
    if (!f0) return TDM_ERR(TDM_ERR_INTERNAL, "output '%s' is missing", name);
    if (np == 1 && !rows) return tdm_tensor_clone(a, f0, out); /* a whole run: any tensor */
    int64_t dims[TDM_MAX_RANK];
    memcpy(dims, f0->dims, sizeof dims);
    dims[0] = 0;
    for (int q = 0; q < np; q++) {
        const tdm_tensor *t = parts[q];
        bool same = t && t->dtype == f0->dtype && t->rank == f0->rank && t->rank >= 1 && !t->device &&
                    !tdm_dtype_has_ptrs(t->dtype);
        for (int d = 1; same && d < t->rank; d++) same = t->dims[d] == f0->dims[d];
        if (!same || (rows && t->dims[0] != rows[q]))
            return TDM_ERR(TDM_ERR_RUNTIME, "output '%s' cannot be joined along the batch dim", name);
        dims[0] += t->dims[0];
    }
    TDM_TRY(tdm_tensor_new(a, f0->dtype, f0->rank, dims, out));
    size_t off = 0;
    for (int q = 0; q < np; q++) {
        memcpy((char *)(*out)->data + off, parts[q]->data, parts[q]->nbytes);
        off += parts[q]->nbytes;
    }
    return NULL;
}

#include <string.h>

#include "api/api_impl.h"
#include "core/alloc.h"

tdm_status *tdm_tensor_create(tdm_env *env, tdm_dtype dtype, int rank, const int64_t *dims,
                              tdm_tensor **out) {
    if (!env || !out || (rank > 0 && !dims))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_create: NULL argument");
    return tdm_tensor_new(env->alloc, dtype, rank, dims, out);
}

tdm_status *tdm_tensor_wrap(tdm_env *env, tdm_dtype dtype, int rank, const int64_t *dims,
                            void *data, size_t bytes, tdm_tensor **out) {
    if (!env || !out || (rank > 0 && !dims))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_wrap: NULL argument");
    if (dtype == TDM_STRING)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_wrap: string tensors cannot wrap memory");
    tdm_tensor *t;
    TDM_TRY(tdm_tensor_new_view(env->alloc, dtype, rank, dims, data, &t));
    if (t->nbytes > bytes || (!data && t->nbytes)) {
        size_t need = t->nbytes;
        tdm_tensor_destroy(t);
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                       "tdm_tensor_wrap: the buffer has %zu bytes, the shape needs %zu", bytes, need);
    }
    *out = t;
    return NULL;
}

tdm_status *tdm_tensor_load_onnx(tdm_env *env, const char *path, tdm_tensor **out) {
    if (!env || !path || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_load_onnx: NULL argument");
    return tdm_onnx_load_tensor_file(path, env->alloc, out);
}

void tdm_tensor_free(tdm_tensor *t) { tdm_tensor_destroy(t); }
tdm_dtype tdm_tensor_dtype(const tdm_tensor *t) { return t ? t->dtype : TDM_UNDEFINED; }
int tdm_tensor_rank(const tdm_tensor *t) { return t ? t->rank : 0; }
const int64_t *tdm_tensor_dims(const tdm_tensor *t) { return t ? t->dims : NULL; }
int64_t tdm_tensor_element_count(const tdm_tensor *t) { return t ? t->count : 0; }
size_t tdm_tensor_byte_size(const tdm_tensor *t) { return t ? t->nbytes : 0; }
void *tdm_tensor_data(tdm_tensor *t) { return t ? t->data : NULL; }
const void *tdm_tensor_data_const(const tdm_tensor *t) { return t ? t->data : NULL; }

tdm_status *tdm_tensor_set_string(tdm_tensor *t, int64_t index, const char *bytes, size_t length) {
    if (!t || t->dtype != TDM_STRING)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_set_string: not a string tensor");
    if (index < 0 || index >= t->count)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_set_string: index %lld out of range",
                       (long long)index);
    if (!t->owns_data)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_set_string: tensor does not own its data");
    char *s = tdm_strndup(t->alloc, bytes ? bytes : "", bytes ? length : 0);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    char **arr = t->data;
    tdm_free(t->alloc, arr[index]);
    arr[index] = s;
    return NULL;
}

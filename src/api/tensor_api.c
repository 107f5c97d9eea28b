#include <string.h>

#include "api/api_impl.h"
#include "core/alloc.h"

/* A sequence, map or optional is made by its constructor, with its items: one from
 * tdm_tensor_create would hold null items, which no kernel takes */
static tdm_status *not_container(const char *fn, tdm_dtype dtype) {
    if (!tdm_dtype_is_container(dtype)) return NULL;
    return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: a %s is made by tdm_%s_create", fn,
                   tdm_dtype_name(dtype), tdm_dtype_name(dtype));
}

tdm_status *tdm_tensor_create(tdm_env *env, tdm_dtype dtype, int rank, const int64_t *dims,
                              tdm_tensor **out) {
    if (!env || !out || (rank > 0 && !dims))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_create: NULL argument");
    TDM_TRY(not_container("tdm_tensor_create", dtype));
    return tdm_tensor_new(env->alloc, dtype, rank, dims, out);
}

tdm_status *tdm_tensor_wrap(tdm_env *env, tdm_dtype dtype, int rank, const int64_t *dims,
                            void *data, size_t bytes, tdm_tensor **out) {
    if (!env || !out || (rank > 0 && !dims))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_wrap: NULL argument");
    TDM_TRY(not_container("tdm_tensor_wrap", dtype));
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

/* ---- sequences, maps, optionals ---- */

static tdm_status *container_of(tdm_env *env, tdm_dtype kind, size_t n, tdm_tensor *const *items,
                                tdm_tensor **out) {
    tdm_tensor *c = NULL;
    TDM_TRY(tdm_container_new(env->alloc, kind, (int64_t)n, &c));
    if (n) memcpy(c->data, items, n * sizeof *items);
    *out = c;
    return NULL;
}

tdm_status *tdm_sequence_create(tdm_env *env, size_t n, tdm_tensor *const *items,
                                tdm_tensor **out) {
    if (!env || !out || (n && !items))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_sequence_create: NULL argument");
    for (size_t i = 0; i < n; i++) {
        if (!items[i] || items[i]->device || items[i]->pooled)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                           "tdm_sequence_create: item %zu is NULL or not a host value", i);
        if (items[i]->dtype != items[0]->dtype)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                           "tdm_sequence_create: item %zu is %s, item 0 %s", i,
                           tdm_dtype_name(items[i]->dtype), tdm_dtype_name(items[0]->dtype));
        for (size_t j = 0; j < i; j++)
            if (items[j] == items[i])
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_sequence_create: item %zu repeats",
                               i);
    }
    return container_of(env, TDM_SEQUENCE, n, items, out);
}

tdm_status *tdm_optional_create(tdm_env *env, tdm_tensor *item, tdm_tensor **out) {
    if (!env || !out)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_optional_create: NULL argument");
    if (item && (item->device || item->pooled || item->dtype == TDM_MAP))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                       "tdm_optional_create: the item must be a host tensor or sequence");
    return container_of(env, TDM_OPTIONAL, item ? 1 : 0, &item, out);
}

tdm_status *tdm_map_create(tdm_env *env, tdm_tensor *keys, tdm_tensor *values, tdm_tensor **out) {
    if (!env || !out || !keys || !values || keys == values)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_map_create: NULL or repeated argument");
    if (keys->rank != 1 || (keys->dtype != TDM_INT64 && keys->dtype != TDM_STRING) || keys->device)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_map_create: keys must be a 1-D int64 or "
                       "string host tensor");
    if (values->device || tdm_dtype_is_container(values->dtype) || values->rank != 1 ||
        values->count != keys->count)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                       "tdm_map_create: values must be a 1-D host tensor as long as the keys");
    tdm_tensor *kv[2] = {keys, values};
    return container_of(env, TDM_MAP, 2, kv, out);
}

size_t tdm_value_item_count(const tdm_tensor *v) {
    return v && tdm_dtype_is_container(v->dtype) ? (size_t)v->count : 0;
}

const tdm_tensor *tdm_value_item(const tdm_tensor *v, size_t i) {
    if (i >= tdm_value_item_count(v)) return NULL;
    return ((tdm_tensor *const *)v->data)[i];
}

tdm_status *tdm_value_load_onnx(tdm_env *env, const char *path, tdm_dtype kind, tdm_tensor **out) {
    if (!env || !path || !out)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_value_load_onnx: NULL argument");
    return tdm_onnx_load_value_file(path, env->alloc, kind, out);
}

/* TensorProto -> tdm_tensor with every count and size checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "onnx/loader.h"
#include "onnx/onnx.pb-c.h"
#include "onnx/proto.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "raw_data is little-endian");

static tdm_status *copy_typed(const Onnx__TensorProto *tp, tdm_tensor *t, const char *name) {
    int64_t n = t->count;
    size_t have = 0;
    const char *field = "";
    switch (t->dtype) {
    case TDM_FLOAT:
    case TDM_COMPLEX64: {
        int64_t need = t->dtype == TDM_COMPLEX64 ? n * 2 : n;
        have = tp->n_float_data;
        field = "float_data";
        if ((int64_t)have != need) break;
        if (need) memcpy(t->data, tp->float_data, (size_t)need * sizeof(float));
        return NULL;
    }
    case TDM_DOUBLE:
    case TDM_COMPLEX128: {
        int64_t need = t->dtype == TDM_COMPLEX128 ? n * 2 : n;
        have = tp->n_double_data;
        field = "double_data";
        if ((int64_t)have != need) break;
        if (need) memcpy(t->data, tp->double_data, (size_t)need * sizeof(double));
        return NULL;
    }
    case TDM_INT64:
        have = tp->n_int64_data;
        field = "int64_data";
        if ((int64_t)have != n) break;
        if (n) memcpy(t->data, tp->int64_data, (size_t)n * sizeof(int64_t));
        return NULL;
    case TDM_UINT32:
    case TDM_UINT64:
        have = tp->n_uint64_data;
        field = "uint64_data";
        if ((int64_t)have != n) break;
        for (int64_t i = 0; i < n; i++) {
            if (t->dtype == TDM_UINT32) ((uint32_t *)t->data)[i] = (uint32_t)tp->uint64_data[i];
            else ((uint64_t *)t->data)[i] = tp->uint64_data[i];
        }
        return NULL;
    case TDM_INT32: case TDM_INT16: case TDM_INT8: case TDM_UINT16: case TDM_UINT8:
    case TDM_BOOL: case TDM_FLOAT16: case TDM_BFLOAT16:
        have = tp->n_int32_data;
        field = "int32_data";
        if ((int64_t)have != n) break;
        for (int64_t i = 0; i < n; i++) {
            int32_t v = tp->int32_data[i];
            switch (t->dtype) {
            case TDM_INT32: ((int32_t *)t->data)[i] = v; break;
            case TDM_INT16: ((int16_t *)t->data)[i] = (int16_t)v; break;
            case TDM_INT8: ((int8_t *)t->data)[i] = (int8_t)v; break;
            case TDM_UINT16: case TDM_FLOAT16: case TDM_BFLOAT16:
                ((uint16_t *)t->data)[i] = (uint16_t)v; break;
            case TDM_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)v; break;
            case TDM_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
            default: break;
            }
        }
        return NULL;
    case TDM_STRING: {
        have = tp->n_string_data;
        field = "string_data";
        if ((int64_t)have != n) break;
        char **s = t->data;
        for (int64_t i = 0; i < n; i++) {
            s[i] = tdm_strndup(t->alloc, (const char *)tp->string_data[i].data, tp->string_data[i].len);
            if (!s[i]) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tensor '%s': out of memory", name);
        }
        return NULL;
    }
    default:
        break;
    }
    return TDM_ERR(TDM_ERR_INVALID_MODEL,
                   "tensor '%s': %s holds %zu values but the shape needs %lld elements", name,
                   field, have, (long long)n);
}

/* The typed field the dtype uses holds exactly the elements the shape needs. */
static tdm_status *check_typed(const Onnx__TensorProto *tp, tdm_dtype dt, int64_t n, const char *name) {
    size_t have;
    int64_t need = n;
    const char *field;
    switch (dt) {
    case TDM_FLOAT: have = tp->n_float_data; field = "float_data"; break;
    case TDM_COMPLEX64: have = tp->n_float_data; field = "float_data"; need = n * 2; break;
    case TDM_DOUBLE: have = tp->n_double_data; field = "double_data"; break;
    case TDM_COMPLEX128: have = tp->n_double_data; field = "double_data"; need = n * 2; break;
    case TDM_INT64: have = tp->n_int64_data; field = "int64_data"; break;
    case TDM_UINT32: case TDM_UINT64: have = tp->n_uint64_data; field = "uint64_data"; break;
    case TDM_STRING: have = tp->n_string_data; field = "string_data"; break;
    default: have = tp->n_int32_data; field = "int32_data"; break;
    }
    if ((int64_t)have != need)
        return TDM_ERR(TDM_ERR_INVALID_MODEL,
                       "tensor '%s': %s holds %zu values but the shape needs %lld elements", name,
                       field, have, (long long)need);
    return NULL;
}

static tdm_status *convert(const Onnx__TensorProto *tp, Onnx__TensorProto *steal,
                           const tdm_allocator *a, const char *base_dir, const char *fallback_name,
                           bool map, tdm_tensor **out);

tdm_status *tdm_onnx_convert_tensor(const Onnx__TensorProto *tp, const tdm_allocator *a,
                                    const char *base_dir, const char *fallback_name,
                                    tdm_tensor **out) {
    return convert(tp, NULL, a, base_dir, fallback_name, false, out);
}

tdm_status *tdm_onnx_take_tensor(Onnx__TensorProto *tp, const tdm_allocator *a, const char *base_dir,
                                 const char *fallback_name, bool map, tdm_tensor **out) {
    return convert(tp, tp, a, base_dir, fallback_name, map, out);
}

static tdm_status *convert(const Onnx__TensorProto *tp, Onnx__TensorProto *steal,
                           const tdm_allocator *a, const char *base_dir, const char *fallback_name,
                           bool map, tdm_tensor **out) {
    const char *name = tp->name && tp->name[0] ? tp->name : fallback_name;
    if (tp->n_dims > TDM_MAX_RANK)
        return TDM_ERR(TDM_ERR_LIMIT, "tensor '%s': rank %zu exceeds the maximum of %d", name,
                       tp->n_dims, TDM_MAX_RANK);
    int dt = tp->data_type;
    if (dt <= 0 || dt >= TDM_DTYPE_COUNT)
        return TDM_ERR(dt > 0 ? TDM_ERR_UNSUPPORTED : TDM_ERR_INVALID_MODEL,
                       "tensor '%s': data type %d is %s", name, dt,
                       dt > 0 ? "not supported" : "missing or invalid");
    if (tp->segment)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "tensor '%s': segmented tensors are not supported", name);
    int64_t dims[TDM_MAX_RANK];
    for (size_t i = 0; i < tp->n_dims; i++) {
        dims[i] = tp->dims[i];
        if (dims[i] < 0)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': dimension %zu is negative (%lld)",
                           name, i, (long long)dims[i]);
    }
    int64_t count = 0;
    size_t nbytes = 0;
    char what[300];
    snprintf(what, sizeof what, "tensor '%s'", name);
    tdm_status *st = tdm_shape_count((int)tp->n_dims, dims, (tdm_dtype)dt, what, &count, &nbytes);
    if (st) return st;
    /* Everything about the data is checked before memory for it is taken: a tiny file
     * declaring a huge tensor must not make tandem allocate and zero that much. */
    bool external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    const char *loc = NULL;
    int64_t offset = 0, length = -1;
    if (external) {
        int seen_loc = 0, seen_off = 0, seen_len = 0;
        for (size_t i = 0; i < tp->n_external_data && !st; i++) {
            const char *k = tp->external_data[i]->key, *v = tp->external_data[i]->value;
            if (!k || !v) continue;
            int *seen = NULL;
            if (strcmp(k, "location") == 0) seen = &seen_loc;
            else if (strcmp(k, "offset") == 0) seen = &seen_off;
            else if (strcmp(k, "length") == 0) seen = &seen_len;
            else continue; /* checksum and unknown keys are ignored */
            if (*seen) {
                st = TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': external data key '%s' appears twice",
                             name, k);
                break;
            }
            *seen = 1;
            if (seen == &seen_loc) {
                loc = v;
            } else {
                char *end;
                long long x = strtoll(v, &end, 10);
                if (!v[0] || *end || x < 0) {
                    st = TDM_ERR(TDM_ERR_INVALID_MODEL,
                                 "tensor '%s': external data %s '%s' is not a non-negative integer",
                                 name, k, v);
                    break;
                }
                if (seen == &seen_off) offset = x;
                else length = x;
            }
        }
        if (!st && !loc)
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': external data without a location", name);
        if (!st && dt == TDM_STRING)
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': string tensors cannot be external", name);
        /* dst NULL: every check (path, range, length) without reading */
        if (!st) st = tdm_onnx_read_external(base_dir, loc, offset, length, NULL, nbytes, name);
    } else if (tp->has_raw_data) {
        if (dt == TDM_STRING)
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': string tensors cannot use raw_data", name);
        else if (tp->raw_data.len != nbytes)
            st = TDM_ERR(TDM_ERR_INVALID_MODEL,
                         "tensor '%s': raw_data has %zu bytes but shape %s of %s needs %zu", name,
                         tp->raw_data.len, tdm_shape_str((int)tp->n_dims, dims, (char[160]){0}, 160),
                         tdm_dtype_name((tdm_dtype)dt), nbytes);
    } else {
        st = check_typed(tp, (tdm_dtype)dt, count, name);
    }
    if (st) return st;
    tdm_tensor *t = NULL;
    /* raw_data that protobuf-c allocated (with `a`, aligned like a tensor's data) becomes the
     * tensor's data: no second copy of the weights while the model loads */
    if (steal && !external && tp->has_raw_data && nbytes > 0 && tp->raw_data.data &&
        (uintptr_t)tp->raw_data.data % TDM_ALIGN == 0) {
        TDM_TRY(tdm_tensor_new_view(a, (tdm_dtype)dt, (int)tp->n_dims, dims, tp->raw_data.data, &t));
        t->owns_data = true;
        steal->raw_data.data = NULL;
        steal->raw_data.len = 0;
        steal->has_raw_data = 0;
        if (t->dtype == TDM_BOOL)
            for (int64_t i = 0; i < t->count; i++) ((uint8_t *)t->data)[i] = ((uint8_t *)t->data)[i] != 0;
        *out = t;
        return NULL;
    }
    if (map && external && nbytes > 0 && dt != TDM_BOOL) {
        /* mapped residency: the file's pages, read on use (an unaligned offset: copied) */
        TDM_TRY(tdm_onnx_map_external(base_dir, loc, offset, length, (tdm_dtype)dt, (int)tp->n_dims,
                                      dims, nbytes, name, a, &t));
        if (t) {
            *out = t;
            return NULL;
        }
    }
    TDM_TRY(tdm_tensor_new(a, (tdm_dtype)dt, (int)tp->n_dims, dims, &t));
    if (external) {
        st = tdm_onnx_read_external(base_dir, loc, offset, length, t->data, t->nbytes, name);
    } else if (tp->has_raw_data) {
        if (t->nbytes) memcpy(t->data, tp->raw_data.data, t->nbytes);
        if (t->dtype == TDM_BOOL)
            for (int64_t i = 0; i < t->count; i++) ((uint8_t *)t->data)[i] = ((uint8_t *)t->data)[i] != 0;
    } else {
        st = copy_typed(tp, t, name);
    }
    if (st) {
        tdm_tensor_destroy(t);
        return st;
    }
    *out = t;
    return NULL;
}

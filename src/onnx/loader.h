/* ONNX protobuf -> graph IR. Everything from the file is treated as hostile: nesting depth is
 * bounded before unpacking, every element count and byte size is checked, external data must
 * stay inside the model's folder. */
#ifndef TDM_ONNX_LOADER_H
#define TDM_ONNX_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/log.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"

#define TDM_MAX_PROTO_DEPTH 160      /* protobuf message nesting */
#define TDM_MAX_SUBGRAPH_DEPTH 32    /* If/Loop/Scan bodies inside bodies */
#define TDM_MAX_MODEL_BYTES ((size_t)INT32_MAX) /* protobuf's 2 GiB message limit */

typedef struct tdm_onnx_model {
    const tdm_allocator *alloc;
    tdm_graph *graph;
    int64_t ir_version;
    char *producer; /* "name version" */
    int64_t model_version;
    unsigned lenient; /* TDM_ONNX_LENIENT_*: what was accepted that the spec forbids */
} tdm_onnx_model;

/* Sloppiness of real exporters that the loader accepts, as ONNX Runtime and onnx.checker do
 * (each is logged once per load as a warning by tdm_onnx_log_lenient). */
#define TDM_ONNX_LENIENT_DUP_OPSET 0x1u      /* a domain imported twice with the same version */
#define TDM_ONNX_LENIENT_DIM_MINUS_ONE 0x2u  /* dim_value -1 on an input/output/value_info */

/* Logs one warning per leniency in m->lenient. */
void tdm_onnx_log_lenient(const tdm_onnx_model *m, const char *what, const tdm_logger *lg);

/* Loads a model file; external data is resolved against the file's folder. */
tdm_status *tdm_onnx_load_file(const char *path, const tdm_allocator *a, tdm_onnx_model **out);
/* Loads from memory; base_dir NULL forbids external data. */
tdm_status *tdm_onnx_load_buffer(const void *data, size_t size, const char *base_dir,
                                 const tdm_allocator *a, tdm_onnx_model **out);
/* tdm_onnx_load_buffer with flags: TDM_ONNX_MAP_EXTERNAL maps external data at offsets
 * aligned to TDM_ALIGN into the weights' tensors (tdm_tensor_new_mapped: pages read from the
 * file on use, never copied whole into memory) instead of reading it into memory. */
#define TDM_ONNX_MAP_EXTERNAL 0x1u
tdm_status *tdm_onnx_load_buffer_ex(const void *data, size_t size, const char *base_dir,
                                    unsigned flags, const tdm_allocator *a, tdm_onnx_model **out);
void tdm_onnx_model_free(tdm_onnx_model *m);

/* Loads one serialized TensorProto (ONNX test data .pb files). */
tdm_status *tdm_onnx_load_tensor_file(const char *path, const tdm_allocator *a, tdm_tensor **out);
/* Loads one serialized value of `kind`: a TensorProto (a tensor dtype or TDM_UNDEFINED), a
 * SequenceProto (TDM_SEQUENCE), an OptionalProto (TDM_OPTIONAL) or a MapProto (TDM_MAP). */
tdm_status *tdm_onnx_load_value_file(const char *path, const tdm_allocator *a, tdm_dtype kind,
                                     tdm_tensor **out);

/* Internal pieces (exposed for tests). */
tdm_status *tdm_onnx_check_wire(const void *data, size_t size, int is_tensor, int max_depth);
/* Reads [offset, offset+length) of `location` (relative to base_dir) into dst through mmap,
 * after checking that the path stays inside base_dir (no absolute paths, no "..", no
 * symlinks or hard links leading out) and that the range lies inside the file.
 * length < 0 means "to the end of the file", in which case it must equal `expect`.
 * dst NULL makes every check without reading. */
tdm_status *tdm_onnx_read_external(const char *base_dir, const char *location, int64_t offset,
                                   int64_t length, void *dst, size_t expect, const char *tensor);
/* The same checks, then a mapped tensor over the range (tdm_tensor_new_mapped); *out NULL
 * (not an error) when the offset is not aligned to TDM_ALIGN: the caller reads it instead. */
tdm_status *tdm_onnx_map_external(const char *base_dir, const char *location, int64_t offset,
                                  int64_t length, tdm_dtype dtype, int rank, const int64_t *dims,
                                  size_t expect, const char *tensor, const tdm_allocator *a,
                                  tdm_tensor **out);
/* The folder part of a path ("." when there is none); writes into buf and returns it. */
char *tdm_path_dir(const char *path, char *buf, size_t size);
/* Reads a whole file into memory (size-limited). */
tdm_status *tdm_read_file(const char *path, const tdm_allocator *a, size_t max, void **data,
                          size_t *size);

#endif

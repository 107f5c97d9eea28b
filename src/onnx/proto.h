/* Internal: protobuf-c glue shared by the loader's files. */
#ifndef TDM_ONNX_PROTO_H
#define TDM_ONNX_PROTO_H

#include <stdbool.h>

#include "core/tensor.h"
#include "onnx/onnx.pb-c.h"

tdm_status *tdm_onnx_convert_tensor(const Onnx__TensorProto *tp, const tdm_allocator *a,
                                    const char *base_dir, const char *fallback_name,
                                    tdm_tensor **out);
/* The same, taking tp's raw_data buffer as the tensor's data when it can (tp loses it); map:
 * external data at an aligned offset becomes a mapped tensor (tdm_tensor_new_mapped). */
tdm_status *tdm_onnx_take_tensor(Onnx__TensorProto *tp, const tdm_allocator *a, const char *base_dir,
                                 const char *fallback_name, bool map, tdm_tensor **out);

#endif

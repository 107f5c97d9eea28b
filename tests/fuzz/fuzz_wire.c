/* Fuzz target: the protobuf wire check alone (src/onnx/wire_check.c), for models and for
 * tensors, at the loader's depth limit and at a small one. Whatever it accepts, protobuf-c
 * must then unpack without unbounded recursion: the accepted bytes are unpacked too. */
#include <stdint.h>
#include <stdlib.h>

#include "onnx/loader.h"
#include "onnx/onnx.pb-c.h"

static void check(const uint8_t *data, size_t size, int is_tensor, int depth) {
    tdm_status *st = tdm_onnx_check_wire(data, size, is_tensor, depth);
    if (st) {
        tdm_code c = tdm_status_code(st);
        if (c != TDM_ERR_INVALID_MODEL && c != TDM_ERR_LIMIT && c != TDM_ERR_OUT_OF_MEMORY) abort();
        tdm_status_free(st);
        return;
    }
    if (is_tensor) {
        Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, size, data);
        if (t) onnx__tensor_proto__free_unpacked(t, NULL);
    } else {
        Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
        if (m) onnx__model_proto__free_unpacked(m, NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int sel = size ? data[0] & 3 : 0;
    /* the first byte picks the mode; the whole input is checked either way */
    check(data, size, sel & 1, (sel & 2) ? 4 : TDM_MAX_PROTO_DEPTH);
    return 0;
}

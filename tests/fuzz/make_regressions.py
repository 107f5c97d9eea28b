#!/usr/bin/env python3
"""Writes minimal reproducers of the crashes the model fuzzer found into
tests/fuzz/regressions/fuzz_model/ (replayed by the fuzz_replay ctest through fuzz_model,
which runs each model with its deterministic random inputs).

Each reproducer is the smallest model showing one finding; the fuzzer's own crash files
(crash-<sha1>) may sit next to them. Usage: tests/fuzz/make_regressions.py
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "regressions", "fuzz_model")


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "repro", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="tandem-fuzz")
    m.ir_version = 8
    return m


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def cases():
    # 1. Node arity is never checked against the schema: a node with fewer inputs than the
    #    operator requires makes infer/kernels read ctx->in[i] past n_in (stack garbage in the
    #    executor's in_stack, or past the array). At load time (tdm_graph_infer_shapes) the
    #    garbage rank then indexes dims[] out of bounds and corrupts the graph's heap.
    yield "arity_argmax_no_input", model(
        [helper.make_node("ArgMax", [], ["y"], name="argmax", axis=1, keepdims=0)],
        [f32("x", [2, 2])], [helper.make_tensor_value_info("y", TensorProto.INT64, [2])])
    yield "arity_det_no_input", model(
        [helper.make_node("Det", [], ["y"], name="det")], [f32("x", [2, 2])], [f32("y", [])])
    yield "arity_conv_no_input", model(
        [helper.make_node("Conv", [], ["y"], name="conv")], [f32("x", [1, 1, 3, 3])],
        [f32("y", [1, 1, 1, 1])])
    yield "arity_matmulinteger_one_input", model(
        [helper.make_node("MatMulInteger", ["x"], ["y"], name="mmi")],
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [3, 4])])
    yield "arity_gru_missing_r", model(
        [helper.make_node("GRU", ["x", "w"], ["y"], name="gru", hidden_size=4)],
        [f32("x", [5, 2, 3]), f32("w", [1, 12, 3])], [f32("y", None)])
    yield "arity_reduceprod_no_input", model(
        [helper.make_node("ReduceProd", [], ["y"], name="rp")], [f32("x", [3])], [f32("y", None)],
        opset=18)
    yield "arity_batchnorm_three_inputs", model(
        [helper.make_node("BatchNormalization", ["x", "s", "b"], ["y"], name="bn")],
        [f32("x", [1, 2, 2, 2])], [f32("y", [1, 2, 2, 2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "s"),
         numpy_helper.from_array(np.zeros(2, np.float32), "b")])

    # 2. Softmax of a NaN: tdm_rd_expf (src/backends/cpu/k_reduce.h:66) shifts a garbage
    #    exponent left by 23 in int32 (UBSan: left shift of 440402047 / of a negative value).
    nan = numpy_helper.from_array(np.array([[np.nan, 1.0, np.inf, -np.inf]], np.float32), "c")
    yield "softmax_nan_exp_shift", model(
        [helper.make_node("Softmax", ["c"], ["s"], name="softmax"),
         helper.make_node("Add", ["s", "x"], ["y"], name="add")],
        [f32("x", [1, 4])], [f32("y", [1, 4])], [nan])

    # 3. DynamicQuantizeLinear of -inf: scale is inf, the zero point -(-inf)/inf is NaN, and
    #    (uint8_t)zp at src/backends/cpu/k_misc_quant.c:254 converts NaN to an integer (UB;
    #    UBSan: -nan is outside the range of representable values of type 'unsigned char').
    bad = numpy_helper.from_array(np.array([-np.inf, 1.0, np.nan], np.float32), "c")
    yield "dynamicquantize_nan_zero_point", model(
        [helper.make_node("DynamicQuantizeLinear", ["c"], ["q", "scale", "zp"], name="dql"),
         helper.make_node("Add", ["scale", "x"], ["y"], name="add")],
        [f32("x", [1])], [f32("y", [1]), helper.make_tensor_value_info("q", TensorProto.UINT8, [3]),
                          helper.make_tensor_value_info("zp", TensorProto.UINT8, [])], [bad],
        opset=11)

    # 4. Conv with asymmetric pads on the oneDNN path: conv_item computes r->slots + 0 with
    #    r->slots NULL (src/backends/cpu/k_dnnl_conv.c:361; UBSan: applying zero offset to
    #    null pointer). Harmless on real hardware, undefined in C.
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "W")
    yield "conv_dnnl_null_slots", model(
        [helper.make_node("Conv", ["x", "W"], ["y"], name="conv", pads=[0, 0, 0, 4])],
        [f32("x", [1, 1, 5, 5])], [f32("y", None)], [w], opset=11)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, m in cases():
        path = os.path.join(OUT, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

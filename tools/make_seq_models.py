#!/usr/bin/env python3
"""Sequence and optional values for the model tests: a graph of the Sequence* ops, with
ONNX Runtime's outputs as the reference, in the node-test layout (tests/models/NAME/model.onnx
+ test_data_set_0/{input,output}_N.pb; sequences as SequenceProto). Deterministic.
Usage: tools/make_seq_models.py [OUT_DIR]   (default tests/models)"""
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def seq_ops():
    fseq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [None, None]))
    nodes = [
        helper.make_node("SequenceInsert", ["s", "x"], ["s2"]),
        helper.make_node("SequenceLength", ["s2"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0),
        helper.make_node("SplitToSequence", ["c"], ["sp"], axis=1),
        helper.make_node("SequenceErase", ["sp", "minus1"], ["e"]),
        helper.make_node("SequenceAt", ["e", "one"], ["a"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["st"], axis=-1, new_axis=1),
        helper.make_node("Optional", ["x"], ["ox"]),
        helper.make_node("OptionalHasElement", ["ox"], ["has"]),
    ]
    inits = [numpy_helper.from_array(np.array(-1, np.int64), "minus1"),
             numpy_helper.from_array(np.array(1, np.int32), "one")]
    g = helper.make_graph(
        nodes, "seq_ops",
        [helper.make_value_info("s", fseq),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_value_info("s2", fseq),
         helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, 3]),
         helper.make_value_info("e", fseq),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, 1]),
         helper.make_tensor_value_info("st", TensorProto.FLOAT, [2, 3, None]),
         helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                          producer_name="tandem-tools")
    m.ir_version = 8
    rng = np.random.default_rng(5)
    feeds = {"s": [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2)],
             "x": rng.standard_normal((2, 3)).astype(np.float32)}
    return m, feeds


def save(out_dir, name, model, feeds):
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)

    def proto(v, nm):
        if isinstance(v, list):
            return numpy_helper.from_list([np.asarray(a) for a in v], nm)
        return numpy_helper.from_array(np.asarray(v), nm)

    for kind, vals in (("input", [(i.name, feeds[i.name]) for i in sess.get_inputs()]),
                       ("output", [(o.name, v) for o, v in zip(sess.get_outputs(), outs)])):
        for i, (nm, v) in enumerate(vals):
            with open(os.path.join(d, "test_data_set_0", f"{kind}_{i}.pb"), "wb") as f:
                f.write(proto(v, nm).SerializeToString())
    print(f"{name}: outputs " + ", ".join(
        f"{o.name}[{len(v)} items]" if isinstance(v, list) else f"{o.name}{list(np.shape(v))}"
        for o, v in zip(sess.get_outputs(), outs)))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models")
    m, feeds = seq_ops()
    save(out_dir, "seq_ops", m, feeds)


if __name__ == "__main__":
    main()

"""Writes, with ONNX Runtime's outputs as the reference (node-test layout: model.onnx,
test_data_set_0/):
- tests/models/if_chain_body: an If whose branches are chains of small nodes with their
  weights in Constant nodes inside the bodies (as silero VAD exports them; the then branch
  also slices its first weight out of a main-graph initializer);
- tests/models/loop_no_cond: a Loop whose optional `cond` input is empty (""), counted by M,
  with a loop-carried value and a scan output;
- tests/models/loop_no_trip_count: a Loop whose optional M is empty, ended by its condition;
- tests/models/if_fused_body: an If whose branches hold the fusion passes' patterns (Conv +
  Relu, MatMul + Add + Relu, Conv + Sigmoid) on weights of the main graph and of the body, a
  Conv output that is also a branch output (not fused away), and a Loop inside the else
  branch whose Conv + Relu reads the main graph's weights two scopes out; one data set per
  branch.

    .venv/bin/python tools/make_control_models.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

MODELS = os.path.join(os.path.dirname(__file__), "..", "tests", "models")
OUT = os.path.join(MODELS, "if_chain_body")


def const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))


def branch(name, seed, act, outer_w=None):
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((16, 24)).astype(np.float32) * 0.3
    b1 = rng.standard_normal((24,)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((24, 8)).astype(np.float32) * 0.3
    s = np.array([0.5], np.float32)
    if outer_w:  # w1 = outer_w[:, 0:24]: a Slice of an enclosing graph's constant
        first = [
            const(name + "_st", np.array([0], np.int64)), const(name + "_en", np.array([24], np.int64)),
            const(name + "_ax", np.array([1], np.int64)),
            helper.make_node("Slice", [outer_w, name + "_st", name + "_en", name + "_ax"], [name + "_w1"]),
        ]
    else:
        first = [const(name + "_w1", w1)]
    nodes = first + [
        const(name + "_b1", b1), const(name + "_w2", w2),
        const(name + "_s", s),
        helper.make_node("MatMul", ["X", name + "_w1"], [name + "_m1"]),
        helper.make_node("Add", [name + "_m1", name + "_b1"], [name + "_a1"]),
        helper.make_node(act, [name + "_a1"], [name + "_r1"]),
        helper.make_node("MatMul", [name + "_r1", name + "_w2"], [name + "_m2"]),
        helper.make_node("Mul", [name + "_m2", name + "_s"], [name + "_x2"]),
        helper.make_node("Sigmoid", [name + "_x2"], [name + "_y"]),
    ]
    out = helper.make_tensor_value_info(name + "_y", TensorProto.FLOAT, [4, 8])
    return helper.make_graph(nodes, name, [], [out])


def main():
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 16])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 8])
    node = helper.make_node("If", ["c"], ["Y"], then_branch=branch("then", 1, "Relu", "Wouter"),
                            else_branch=branch("else", 2, "Tanh"))
    wouter = np.random.default_rng(3).standard_normal((16, 32)).astype(np.float32) * 0.3
    g = helper.make_graph([node], "if_chain_body", [c, x], [y],
                          [numpy_helper.from_array(wouter, "Wouter")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    os.makedirs(os.path.join(OUT, "test_data_set_0"), exist_ok=True)
    onnx.save(m, os.path.join(OUT, "model.onnx"))
    rng = np.random.default_rng(7)
    feeds = {"c": np.array(True), "X": rng.standard_normal((4, 16)).astype(np.float32)}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    for i, (k, v) in enumerate(feeds.items()):
        t = numpy_helper.from_array(v, k)
        with open(os.path.join(OUT, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    with open(os.path.join(OUT, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(want, "Y").SerializeToString())


def save_case(name, m, feeds):
    out = os.path.join(MODELS, name)
    onnx.checker.check_model(m)
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    onnx.save(m, os.path.join(out, "model.onnx"))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    wants = sess.run(None, feeds)
    for i, (k, v) in enumerate(feeds.items()):
        with open(os.path.join(out, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    for i, (o, want) in enumerate(zip(m.graph.output, wants)):
        with open(os.path.join(out, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(want, o.name).SerializeToString())


def loops():
    f32, b, i64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    vi = helper.make_tensor_value_info
    # body: x_out = tanh(x_in * 0.9 + 0.1); cond_out = sum(x_out) < limit; scan = x_out
    nodes = [
        helper.make_node("Mul", ["x_in", "k"], ["m"]),
        helper.make_node("Add", ["m", "c"], ["a"]),
        helper.make_node("Tanh", ["a"], ["x_out"]),
        helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
        helper.make_node("Less", ["s", "limit"], ["cond_out"]),
        helper.make_node("Identity", ["x_out"], ["scan"]),
    ]
    inits = [numpy_helper.from_array(np.float32(0.9), "k"), numpy_helper.from_array(np.float32(0.1), "c"),
             numpy_helper.from_array(np.float32(1.8), "limit")]
    body = helper.make_graph(nodes, "body", [vi("i", i64, []), vi("cond_in", b, []), vi("x_in", f32, [4])],
                             [vi("cond_out", b, []), vi("x_out", f32, [4]), vi("scan", f32, [4])], inits)
    x0 = np.array([-0.5, 0.0, 0.25, 0.75], np.float32)
    for name, ins, init in (("loop_no_cond", ["M", "", "x0"], [numpy_helper.from_array(np.int64(6), "M")]),
                            ("loop_no_trip_count", ["", "cond", "x0"],
                             [numpy_helper.from_array(np.array(True), "cond")])):
        node = helper.make_node("Loop", ins, ["x", "trace"], body=body)
        g = helper.make_graph([node], name, [vi("x0", f32, [4])], [vi("x", f32, [4]), vi("trace", f32, ["n", 4])],
                              init)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        save_case(name, m, {"x0": x0})


def save_sets(name, m, sets):
    """Like save_case, with one test_data_set per feeds dict."""
    out = os.path.join(MODELS, name)
    onnx.checker.check_model(m)
    os.makedirs(out, exist_ok=True)
    onnx.save(m, os.path.join(out, "model.onnx"))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, feeds in enumerate(sets):
        d = os.path.join(out, f"test_data_set_{k}")
        os.makedirs(d, exist_ok=True)
        wants = sess.run(None, feeds)
        for i, (n, v) in enumerate(feeds.items()):
            with open(os.path.join(d, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
        for i, (o, want) in enumerate(zip(m.graph.output, wants)):
            with open(os.path.join(d, f"output_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(want, o.name).SerializeToString())


def fused_body():
    f32, b, i64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
    vi, node = helper.make_tensor_value_info, helper.make_node
    rng = np.random.default_rng(11)
    w = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("Wc", w(8, 4, 3)), ("Bc", w(8)), ("Wm", w(16, 12)), ("Bm", w(12)), ("Wl", w(4, 4, 3)),
        ("Bl", w(4)), ("M", np.int64(3)))]
    # then: Relu(Conv(X)) (main-graph weights), Relu(MatMul(V) + Bm), Sigmoid(Conv(Y1)) with
    # weights in a Constant node of the branch
    then = helper.make_graph([
        node("Conv", ["X", "Wc", "Bc"], ["t_c"], pads=[1, 1]),
        node("Relu", ["t_c"], ["t_y1"]),
        node("MatMul", ["V", "Wm"], ["t_m"]),
        node("Add", ["t_m", "Bm"], ["t_a"]),
        node("Relu", ["t_a"], ["t_y2"]),
        const("t_w3", w(4, 8, 1)),
        node("Conv", ["t_y1", "t_w3"], ["t_c3"]),
        node("Sigmoid", ["t_c3"], ["t_y3"]),
    ], "then", [], [vi("t_y1", f32, [1, 8, 10]), vi("t_y2", f32, [3, 12]), vi("t_y3", f32, [1, 4, 10])])
    # the Loop's body: x = Relu(Conv(x, Wl, Bl)), Wl and Bl from the main graph
    body = helper.make_graph([
        node("Conv", ["x_in", "Wl", "Bl"], ["l_c"], pads=[1, 1]),
        node("Relu", ["l_c"], ["x_out"]),
        node("Identity", ["cond_in"], ["cond_out"]),
    ], "body", [vi("i", i64, []), vi("cond_in", b, []), vi("x_in", f32, [1, 4, 10])],
        [vi("cond_out", b, []), vi("x_out", f32, [1, 4, 10])])
    # else: Conv(X) is a branch output and read by a Relu (the Conv stays); MatMul + Add
    # without an activation; a Loop of Conv + Relu over X
    els = helper.make_graph([
        node("Conv", ["X", "Wc", "Bc"], ["e_y1"], pads=[1, 1]),
        node("Relu", ["e_y1"], ["e_r"]),
        node("MatMul", ["V", "Wm"], ["e_m"]),
        node("Add", ["e_m", "Bm"], ["e_y2"]),
        node("Loop", ["M", "", "X"], ["e_l"], body=body),
        node("Conv", ["e_r", "Wc3e"], ["e_c3"]),
        node("Add", ["e_c3", "e_l"], ["e_y3"]),
    ], "else", [], [vi("e_y1", f32, [1, 8, 10]), vi("e_y2", f32, [3, 12]), vi("e_y3", f32, [1, 4, 10])])
    inits.append(numpy_helper.from_array(w(4, 8, 1), "Wc3e"))
    g = helper.make_graph(
        [node("If", ["c"], ["Y1", "Y2", "Y3"], then_branch=then, else_branch=els)], "if_fused_body",
        [vi("c", b, []), vi("X", f32, [1, 4, 10]), vi("V", f32, [3, 16])],
        [vi("Y1", f32, [1, 8, 10]), vi("Y2", f32, [3, 12]), vi("Y3", f32, [1, 4, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    r = np.random.default_rng(5)
    x = r.standard_normal((1, 4, 10)).astype(np.float32)
    v = r.standard_normal((3, 16)).astype(np.float32)
    save_sets("if_fused_body", m, [{"c": np.array(c), "X": x, "V": v} for c in (True, False)])


if __name__ == "__main__":
    main()
    loops()
    fused_body()

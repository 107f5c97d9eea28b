#!/usr/bin/env python3
"""Writes the malformed-model cases in tests/bad_models/.

Each case is a folder tests/bad_models/CASE/ with model.onnx (plus any files the case needs) and
expect.txt:

    line 1: the status code name tandem must return, as tdm_code_name() prints it
            ("invalid model", "limit exceeded", "unsupported", "i/o error", ...)
    line 2: a substring the status message must contain
    line 3: (optional) "session": the model may load with tdm_model_load; the failure comes
            from tdm_session_create (for example an operator without a kernel)

tests/unit/test_bad_models.c loads every case through the public API and checks both lines.
Cases that cannot live in git are made by that test at run time instead: a hard link (git does
not keep hard links) and the 100k-level protobuf nesting (about 700 KB; the committed
deep_protobuf_nesting case is 1000 levels, which is just as far past the limit).

Usage: tools/make_bad_models.py [--out DIR] [--deep-levels N]
"""
import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPSET = 17


def model_of(nodes, inputs, outputs, inits=(), opsets=None):
    g = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=opsets or [helper.make_opsetid("", OPSET)],
                          producer_name="tandem-tools")
    m.ir_version = 8
    return m


def fvi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def add_model(init):
    """y = x + W with W [4] float: the carrier for broken initializers."""
    return model_of([helper.make_node("Add", ["x", "W"], ["y"], name="add")],
                    [fvi("x", [4])], [fvi("y", [4])], [init])


def raw_tensor(dims, raw=b"", name="W"):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def external_tensor(entries, name="W", dims=(4,)):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def valid_small_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.1).astype(np.float32), "W")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "B")
    return model_of([helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", ["c"], ["y"], name="relu")],
                    [fvi("x", [1, 3, 8, 8])], [fvi("y", [1, 8, 8, 8])], [w, b])


# ---- hand-made protobuf bytes ----

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(num, payload):
    return varint((num << 3) | 2) + varint(len(payload)) + payload


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def deep_sequence_model(levels):
    """A graph input whose type is sequence(sequence(...(tensor(float)))) `levels` deep.

    TypeProto.sequence_type = 4, TypeProto.Sequence.elem_type = 1, TypeProto.tensor_type = 1,
    TypeProto.Tensor.elem_type = 1, ValueInfoProto.name = 1 / type = 2, GraphProto.input = 11 /
    output = 12 / name = 2, ModelProto.ir_version = 1 / graph = 7 / opset_import = 8,
    OperatorSetIdProto.version = 2."""
    t = field_bytes(1, field_varint(1, 1))  # TypeProto{tensor_type{elem_type: FLOAT}}
    for _ in range(levels):
        t = field_bytes(4, field_bytes(1, t))  # TypeProto{sequence_type{elem_type: t}}
    vi_in = field_bytes(1, b"x") + field_bytes(2, t)
    vi_out = field_bytes(1, b"x")
    graph = field_bytes(2, b"deep") + field_bytes(11, vi_in) + field_bytes(12, vi_out)
    return field_varint(1, 8) + field_bytes(7, graph) + field_bytes(8, field_varint(2, OPSET))


def nested_if_model(levels):
    """If nodes whose then-branches hold If nodes, `levels` deep. Built as bytes: the Python
    protobuf runtime refuses to build messages nested this deep.

    NodeProto: input 1, output 2, name 3, op_type 4, attribute 5. AttributeProto: name 1, g 6,
    type 20 (GRAPH = 5). GraphProto: node 1, name 2, input 11, output 12."""
    def vi(name):
        return fvi(name, [4]).SerializeToString()

    def node(op, inputs, output, name, attrs=()):
        b = b"".join(field_bytes(1, i.encode()) for i in inputs)
        b += field_bytes(2, output.encode()) + field_bytes(3, name.encode()) + field_bytes(4, op.encode())
        return b + b"".join(field_bytes(5, a) for a in attrs)

    def graph_attr(attr_name, graph):
        return field_bytes(1, attr_name.encode()) + field_bytes(6, graph) + field_varint(20, 5)

    def graph(nodes, name, output):
        return b"".join(field_bytes(1, n) for n in nodes) + field_bytes(2, name.encode()) + \
            field_bytes(12, vi(output))

    def else_graph(depth):
        return graph([node("Identity", ["x"], f"e{depth}", f"eid{depth}")], f"else{depth}", f"e{depth}")

    g = graph([node("Identity", ["x"], f"o{levels}", f"id{levels}")], f"then{levels}", f"o{levels}")
    for depth in range(levels - 1, -1, -1):
        out = f"o{depth}" if depth else "y"
        n = node("If", ["cond"], out, f"if{depth}",
                 [graph_attr("then_branch", g), graph_attr("else_branch", else_graph(depth + 1))])
        if depth:
            g = graph([n], f"then{depth}", out)
        else:
            g = b"".join([field_bytes(1, n), field_bytes(2, b"nested_if"),
                          field_bytes(11, helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
                                      .SerializeToString()),
                          field_bytes(11, vi("x")), field_bytes(12, vi("y"))])
    return field_varint(1, 8) + field_bytes(7, g) + field_bytes(8, field_varint(2, OPSET))


# ---- cases ----

def cases(deep_levels):
    """Yields (name, expect lines, files) with files = {relative path: bytes | ("symlink", target)}."""
    valid = valid_small_model().SerializeToString()

    yield "empty_file", ["invalid model", "empty"], {"model.onnx": b""}
    # 'G' = field 8, wire type 7, which protobuf does not have
    yield "garbage_8_bytes", ["invalid model", "malformed protobuf"], {"model.onnx": b"GARBAGE!"}
    yield "truncated_model", ["invalid model", "file truncated?"], {"model.onnx": valid[: len(valid) // 2]}
    rng = np.random.default_rng(4096)
    yield "random_4k", ["invalid model", "protobuf"], {"model.onnx": rng.bytes(4096)}

    yield ("negative_dims", ["invalid model", "dimension 0 is negative"],
           {"model.onnx": add_model(raw_tensor([-1, 4])).SerializeToString()})
    yield ("dims_overflow", ["limit exceeded", "element count overflows"],
           {"model.onnx": add_model(raw_tensor([1 << 32, 1 << 32, 4])).SerializeToString()})
    yield ("raw_data_short", ["invalid model", "raw_data has 32 bytes"],
           {"model.onnx": add_model(raw_tensor([4, 4], bytes(32))).SerializeToString()})

    yield ("deep_protobuf_nesting", ["limit exceeded", "nested deeper than"],
           {"model.onnx": deep_sequence_model(deep_levels)})
    yield ("deep_subgraph_nesting", ["limit exceeded", "subgraphs are nested deeper than 32"],
           {"model.onnx": nested_if_model(40)})

    data16 = np.arange(4, dtype=np.float32).tobytes()
    ext = lambda entries: add_model(external_tensor(entries)).SerializeToString()  # noqa: E731
    yield ("external_absolute", ["invalid model", "is absolute"],
           {"model.onnx": ext([("location", "/etc/hostname")])})
    yield ("external_dotdot", ["invalid model", "leaves the model's folder"],
           {"model.onnx": ext([("location", "../secret.bin")])})
    yield ("external_dotdot_nested", ["invalid model", "leaves the model's folder"],
           {"model.onnx": ext([("location", "a/../../x")]), "a/placeholder.txt": b"a folder\n"})
    # The link points at a file of the repository outside the case folder (tests/CMakeLists.txt),
    # so that the case does not depend on the machine's /etc.
    yield ("external_symlink", ["invalid model", "resolves outside the model's folder"],
           {"model.onnx": ext([("location", "weights.bin")]),
            "weights.bin": ("symlink", "../../CMakeLists.txt")})
    yield ("external_past_end", ["invalid model", "runs past the end"],
           {"model.onnx": ext([("location", "weights.bin"), ("offset", "8"), ("length", "16")]),
            "weights.bin": data16})
    yield ("external_duplicate_location", ["invalid model", "'location' appears twice"],
           {"model.onnx": ext([("location", "weights.bin"), ("location", "other.bin")]),
            "weights.bin": data16, "other.bin": data16})

    cyc = model_of([helper.make_node("Add", ["x", "b"], ["a"], name="A"),
                    helper.make_node("Relu", ["a"], ["b"], name="B")],
                   [fvi("x", [4])], [fvi("b", [4])])
    yield "cyclic_graph", ["invalid model", "cycle"], {"model.onnx": cyc.SerializeToString()}
    unk = model_of([helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")],
                   [fvi("x", [4])], [fvi("y", [4])])
    yield ("unknown_op", ["unsupported", "NoSuchOp", "session"],
           {"model.onnx": unk.SerializeToString()})
    # domain "tandem" is the graph optimizer's own (packed weights, blocked layouts): refused
    internal = [helper.make_opsetid("", OPSET), helper.make_opsetid("tandem", 1)]
    packed = model_of([helper.make_node("MatMulNBitsPacked", ["x", "p"], ["y"], name="packed",
                                        domain="tandem", K=64, N=64, bits=4, block_size=32)],
                      [fvi("x", [1, 64])], [fvi("y", [1, 64])],
                      [numpy_helper.from_array(np.zeros(2560, np.uint8), "p")], opsets=internal)
    yield ("internal_domain_node", ["invalid model", "node 'packed' (MatMulNBitsPacked) is in domain 'tandem'"],
           {"model.onnx": packed.SerializeToString()})
    imp = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                   [fvi("x", [4])], [fvi("y", [4])], opsets=internal)
    yield ("internal_domain_import", ["invalid model", "imports an opset of domain 'tandem'"],
           {"model.onnx": imp.SerializeToString()})
    undef = model_of([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")],
                     [fvi("x", [4])], [fvi("y", [4])])
    yield ("undefined_input", ["invalid model", "'ghost', which no node, input or initializer defines"],
           {"model.onnx": undef.SerializeToString()})
    # ai.onnx.ml tree ensembles whose nodes do not form trees, or read missing features
    def tree(true_ids, false_ids, features=(0, 0, 0), modes=("BRANCH_LEQ", "LEAF", "LEAF")):
        n = len(true_ids)
        node = helper.make_node(
            "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", name="trees",
            nodes_treeids=[0] * n, nodes_nodeids=list(range(n)), nodes_featureids=list(features),
            nodes_modes=list(modes), nodes_values=[0.5] * n, nodes_truenodeids=list(true_ids),
            nodes_falsenodeids=list(false_ids), target_treeids=[0], target_nodeids=[n - 1],
            target_ids=[0], target_weights=[1.0], n_targets=1)
        return model_of([node], [fvi("x", [2, 3])], [fvi("y", [2, 1])],
                        opsets=[helper.make_opsetid("", OPSET),
                                helper.make_opsetid("ai.onnx.ml", 3)]).SerializeToString()
    yield ("tree_cycle", ["invalid argument", "is not a tree", "session"],
           {"model.onnx": tree([1, 2, 0], [2, 1, 0], modes=("BRANCH_LEQ", "BRANCH_LEQ", "LEAF"))})
    yield ("tree_missing_child", ["invalid argument", "does not exist", "session"],
           {"model.onnx": tree([1, 0, 0], [7, 0, 0])})
    yield ("tree_feature_out_of_range", ["invalid argument", "reads feature 9 but the input has 3"],
           {"model.onnx": tree([1, 0, 0], [2, 0, 0], features=(9, 0, 0))})
    # TreeEnsemble (ai.onnx.ml opset 5) with one attribute broken at a time
    def tree5(**change):
        attrs = dict(
            n_targets=2, tree_roots=[0, 2], nodes_featureids=[0, 1, 2],
            nodes_splits=numpy_helper.from_array(np.array([0.5, 0, 0], np.float32)),
            nodes_modes=numpy_helper.from_array(np.array([0, 6, 0], np.uint8)),
            nodes_truenodeids=[1, 1, 3], nodes_falsenodeids=[0, 2, 3],
            nodes_trueleafs=[0, 1, 1], nodes_falseleafs=[1, 1, 1], leaf_targetids=[0, 1, 0, 1],
            leaf_weights=numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32)),
            membership_values=numpy_helper.from_array(np.array([1, 2, np.nan], np.float32)))
        attrs.update(change)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", name="te", **attrs)
        return {"model.onnx": model_of([node], [fvi("x", [2, 3])], [fvi("y", [2, 2])],
                                       opsets=[helper.make_opsetid("", OPSET),
                                               helper.make_opsetid("ai.onnx.ml", 5)]).SerializeToString()}
    f32 = lambda *v: numpy_helper.from_array(np.array(v, np.float32))  # noqa: E731
    bad5 = [
        ("splits_type", "nodes_splits and leaf_weights must have the input's type",
         dict(nodes_splits=numpy_helper.from_array(np.array([0.5, 0, 0], np.float64)))),
        ("lengths", "the nodes_* attributes must all have 3 entries", dict(nodes_truenodeids=[1, 1])),
        ("mode", "nodes_modes[2] = 9 is not a mode",
         dict(nodes_modes=numpy_helper.from_array(np.array([0, 6, 9], np.uint8)))),
        ("modes_type", "nodes_modes must be a uint8 tensor",
         dict(nodes_modes=numpy_helper.from_array(np.array([0, 6, 0], np.int64)))),
        ("member_missing", "BRANCH_MEMBER nodes need membership_values", dict(membership_values=None)),
        ("member_sets", "membership_values has 2 sets for 1 BRANCH_MEMBER nodes",
         dict(membership_values=f32(1, np.nan, 2, np.nan))),
        ("child", "node 1: a child (1 or 5) does not exist", dict(nodes_falsenodeids=[0, 5, 3])),
        ("root", "tree_roots[1] = 3 is not a node", dict(tree_roots=[0, 3])),
        ("leaf_flag", "must be 0 or 1 (node 0)", dict(nodes_trueleafs=[2, 1, 1])),
        ("target", "leaf_targetids has target 2 but n_targets is 2", dict(leaf_targetids=[0, 1, 0, 2])),
        ("leaf_lengths", "leaf_targetids and leaf_weights must have the same", dict(leaf_weights=f32(1, 2))),
        ("aggregate", "aggregate_function 7 is not one of 0..3", dict(aggregate_function=7)),
        ("post", "post_transform 9 is not one of 0..4", dict(post_transform=9)),
        ("feature", "node 2 reads feature 3 but the input has 3", dict(nodes_featureids=[0, 1, 3])),
        ("cycle", "is not a tree", dict(nodes_falsenodeids=[0, 0, 3], nodes_falseleafs=[1, 0, 1])),
    ]
    for name, msg, change in bad5:
        yield (f"tree5_{name}", ["invalid argument", msg, "session"], tree5(**change))
    # an ai.onnx.ml SVM whose support vectors do not split into vectors_per_class vectors
    svm = helper.make_node(
        "SVMClassifier", ["x"], ["y", "z"], domain="ai.onnx.ml", name="svm",
        classlabels_ints=[0, 1], vectors_per_class=[2, 1], support_vectors=[0.5] * 10,
        coefficients=[1.0, -1.0, 0.5], rho=[0.1], kernel_type="RBF", kernel_params=[0.1, 0, 3])
    svm_model = model_of([svm], [fvi("x", [2, 3])],
                         [helper.make_tensor_value_info("y", TensorProto.INT64, [2]),
                          fvi("z", [2, 2])],
                         opsets=[helper.make_opsetid("", OPSET),
                                 helper.make_opsetid("ai.onnx.ml", 1)])
    yield ("svm_support_vectors_ragged",
           ["invalid argument",
            "support_vectors (10 values) must be a non-empty multiple of the 3"],
           {"model.onnx": svm_model.SerializeToString()})
    # GroupQueryAttention whose num_heads is not a multiple of kv_num_heads, and one that
    # asks for what the CPU kernel does not implement (a quantized KV cache)
    def gqa(**attrs):
        ins = [fvi("q", [1, 2, 5 * 8]), fvi("k", [1, 2, 2 * 8]), fvi("v", [1, 2, 2 * 8]),
               helper.make_tensor_value_info("sl", TensorProto.INT32, [1]),
               helper.make_tensor_value_info("tl", TensorProto.INT32, [])]
        node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tl"], ["y"],
                                domain="com.microsoft", name="gqa", **attrs)
        return model_of([node], ins, [fvi("y", [1, 2, 40])],
                        opsets=[helper.make_opsetid("", OPSET),
                                helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    yield ("gqa_heads_not_grouped",
           ["invalid argument", "num_heads (5) and kv_num_heads (2) must be positive and num_heads a"],
           {"model.onnx": gqa(num_heads=5, kv_num_heads=2)})
    yield ("gqa_quantized_cache", ["unsupported", "quantized KV caches are not implemented"],
           {"model.onnx": gqa(num_heads=4, kv_num_heads=2, k_quant_type="PER_TENSOR")})
    noop = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                    [fvi("x", [4])], [fvi("y", [4])], opsets=[helper.make_opsetid("com.example", 1)])
    yield ("no_default_opset", ["invalid model", "imports no opset of"],
           {"model.onnx": noop.SerializeToString()})


README = """# Malformed models

Made by `tools/make_bad_models.py`; checked by `tests/unit/test_bad_models.c`, which loads each
CASE/model.onnx with tdm_model_load and tdm_session_create and compares the status with
CASE/expect.txt:

- line 1: the code name (tdm_code_name), e.g. `invalid model`, `limit exceeded`, `unsupported`
- line 2: a substring of the message
- line 3 (optional): `session` when tdm_model_load may succeed and only the session must fail

The hard-link case and the 100k-level protobuf nesting case are made by the C test at run time
(git keeps neither hard links nor wants a ~700 KB file of nesting).
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "bad_models"))
    ap.add_argument("--deep-levels", type=int, default=1000,
                    help="sequence nesting of the deep_protobuf_nesting case (default 1000)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(README)
    for name, expect, files in cases(args.deep_levels):
        d = os.path.join(args.out, name)
        if os.path.islink(d) or os.path.isfile(d):
            os.unlink(d)
        elif os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        for rel, content in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            if isinstance(content, tuple):
                os.symlink(content[1], p)
            else:
                with open(p, "wb") as f:
                    f.write(content)
        with open(os.path.join(d, "expect.txt"), "w") as f:
            f.write("\n".join(expect) + "\n")
        print(f"{name}: {os.path.getsize(os.path.join(d, 'model.onnx'))} bytes; expect {expect}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Random TreeEnsemble (ai.onnx.ml opset 5) models for the model tests, with ONNX Runtime's
outputs as the reference (tests/models_ml/ml_tree_ensemble5_*; node-test layout).

Every branch mode (BRANCH_LEQ .. BRANCH_NEQ and BRANCH_MEMBER), missing-value tracks, trees that
are one leaf, every aggregate_function and post_transform, 1 and 3 targets, float and double.
Inputs are integers from -3 to 12 and NaN, thresholds integers and halves, so that the EQ / NEQ /
MEMBER branches and exact ties are taken. ONNX Runtime implements BRANCH_MEMBER for integer
members only (and truncates a non-integer input first), which is why the inputs are integers
here. float16 (which ONNX Runtime does not run): the float model of the same numbers as the
reference, weights with few bits so that both sums are exact.
post_transform: ONNX Runtime's untransformed scores with the spec's transform applied here
(see spec_post: ONNX Runtime 1.32 departs from the spec there); PROBIT from ONNX Runtime.
Deterministic: fixed seeds. Usage: tools/make_tree_ensemble_models.py [OUT_DIR]"""
import os
import shutil
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}


def rand_trees(rng, n_trees, depth, n_features, n_targets, modes):
    nodes = {k: [] for k in ("feat", "split", "mode", "yes", "no", "yes_leaf", "no_leaf", "miss")}
    members, leaf_target, leaf_weight, roots = [], [], [], []

    def leaf():
        leaf_target.append(int(rng.integers(n_targets)))
        leaf_weight.append(float(rng.integers(-16, 17)) / 8)
        return len(leaf_target) - 1

    def new_node():
        for k in nodes:
            nodes[k].append(0)
        return len(nodes["feat"]) - 1

    def grow(d):
        i = new_node()
        m = int(rng.choice(modes))
        nodes["feat"][i] = int(rng.integers(n_features))
        nodes["mode"][i] = m
        nodes["split"][i] = float(rng.integers(-6, 25)) / 2
        nodes["miss"][i] = int(rng.integers(2))
        if m == 6:
            k = int(rng.integers(1, 5))
            members.extend(sorted({float(v) for v in rng.integers(0, 13, size=k)}) + [np.nan])
        for side in ("yes", "no"):
            if d + 1 >= depth or rng.random() < 0.2:
                nodes[side][i], nodes[side + "_leaf"][i] = leaf(), 1
            else:
                nodes[side][i], nodes[side + "_leaf"][i] = grow(d + 1), 0
        return i

    for _ in range(n_trees):
        if rng.random() < 0.1:  # a tree that is one leaf: both branches name the same leaf
            i = new_node()
            nodes["yes"][i] = nodes["no"][i] = leaf()
            nodes["yes_leaf"][i] = nodes["no_leaf"][i] = 1
            roots.append(i)
        else:
            roots.append(grow(0))
    return nodes, members, leaf_target, leaf_weight, roots


def make_model(trees, n_targets, agg, post, dtype, n_features):
    nodes, members, leaf_target, leaf_weight, roots = trees
    attrs = dict(
        n_targets=n_targets, aggregate_function=agg, post_transform=post, tree_roots=roots,
        nodes_featureids=nodes["feat"],
        nodes_splits=numpy_helper.from_array(np.array(nodes["split"], dtype=dtype)),
        nodes_modes=numpy_helper.from_array(np.array(nodes["mode"], dtype=np.uint8)),
        nodes_truenodeids=nodes["yes"], nodes_falsenodeids=nodes["no"],
        nodes_trueleafs=nodes["yes_leaf"], nodes_falseleafs=nodes["no_leaf"],
        nodes_missing_value_tracks_true=nodes["miss"], leaf_targetids=leaf_target,
        leaf_weights=numpy_helper.from_array(np.array(leaf_weight, dtype=dtype)))
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members, dtype=dtype))
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    t = NP_TO_ONNX[dtype]
    g = helper.make_graph([node], "tree_ensemble", [helper.make_tensor_value_info("X", t, [None, n_features])],
                          [helper.make_tensor_value_info("Y", t, [None, n_targets])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)],
                             ir_version=10)


def rand_rows(rng, n, n_features, dtype):
    x = rng.integers(-3, 13, size=(n, n_features)).astype(np.float64)
    x[rng.random((n, n_features)) < 0.06] = np.nan
    return x.astype(dtype)


def save(out_dir, name, model, x, y):
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for kind, v, n in (("input", x, "X"), ("output", y, "Y")):
        with open(os.path.join(d, "test_data_set_0", f"{kind}_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, n).SerializeToString())


def spec_post(raw, post):
    """post_transform as the spec numbers it (1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO) on ONNX
    Runtime's untransformed scores: ONNX Runtime 1.32 reads 1 as LOGISTIC and 2 as SOFTMAX, and
    applies nothing but PROBIT to a single target (microsoft/onnxruntime#26596)."""
    r = raw.astype(np.float64)
    if post == 2:
        return (1 / (1 + np.exp(-r))).astype(raw.dtype)
    keep = np.abs(r) > 1e-7 if post == 3 else np.ones_like(r, dtype=bool)
    e = np.where(keep, np.exp(r - r.max(axis=1, keepdims=True)), 0)
    return (e / e.sum(axis=1, keepdims=True)).astype(raw.dtype)


def reference(trees, targets, agg, post, dtype, n_features, x):
    if post in (1, 2, 3):
        return spec_post(ort_run(make_model(trees, targets, agg, 0, dtype, n_features), x), post)
    return ort_run(make_model(trees, targets, agg, post, dtype, n_features), x)


def ort_run(model, x):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"X": x})[0]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "models_ml")
    rng = np.random.default_rng(17)
    F = 6
    all_modes = [0, 1, 2, 3, 4, 5, 6]
    aggs = {0: "average", 1: "sum", 2: "min", 3: "max"}
    posts = {0: "none", 1: "softmax", 2: "logistic", 3: "softmax_zero", 4: "probit"}
    for agg, an in aggs.items():
        for post, pn in posts.items():
            targets = 1 if (agg + post) % 3 == 0 else 3
            trees = rand_trees(rng, 12, 5, F, targets, all_modes)
            if post == 4:  # PROBIT of scores in (0, 1): small positive weights
                trees[3][:] = [abs(w) / 40 + 0.01 for w in trees[3]]
            m = make_model(trees, targets, agg, post, np.float32, F)
            x = rand_rows(rng, 200, F, np.float32)
            save(out, f"ml_tree_ensemble5_{an}_{pn}_{targets}t", m, x, reference(trees, targets, agg, post, np.float32, F, x))
    for agg, an in aggs.items():  # double
        trees = rand_trees(rng, 20, 6, F, 3, all_modes)
        m = make_model(trees, 3, agg, 2 if agg == 1 else 0, np.float64, F)
        x = rand_rows(rng, 200, F, np.float64)
        save(out, f"ml_tree_ensemble5_double_{an}", m, x,
             reference(trees, 3, agg, 2 if agg == 1 else 0, np.float64, F, x))
    trees = rand_trees(rng, 10, 5, F, 2, all_modes)  # float16: the float model as the reference
    x = rand_rows(rng, 200, F, np.float16)
    y = ort_run(make_model(trees, 2, 1, 0, np.float32, F), x.astype(np.float32)).astype(np.float16)
    save(out, "ml_tree_ensemble5_float16_sum", make_model(trees, 2, 1, 0, np.float16, F), x, y)
    trees = rand_trees(rng, 30, 7, F, 2, [0, 1, 2, 3])  # ordered tests only: the compact walk
    m = make_model(trees, 2, 1, 0, np.float32, F)
    x = np.concatenate([rand_rows(rng, 300, F, np.float32),
                        (rng.standard_normal((100, F)) * 6).astype(np.float32)])
    save(out, "ml_tree_ensemble5_ordered_sum", m, x, reference(trees, 2, 1, 0, np.float32, F, x))
    trees = rand_trees(rng, 40, 8, 10, 4, [0])  # a converter's form: BRANCH_LEQ only, deep
    m = make_model(trees, 4, 1, 1, np.float32, 10)
    x = (rng.standard_normal((300, 10)) * 6).astype(np.float32)
    save(out, "ml_tree_ensemble5_leq_softmax", m, x, reference(trees, 4, 1, 1, np.float32, 10, x))


if __name__ == "__main__":
    main()

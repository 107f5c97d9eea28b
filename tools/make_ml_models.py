#!/usr/bin/env python3
"""Classic ML models (ai.onnx.ml) for the model tests: scikit-learn estimators converted with
skl2onnx (probabilities as a tensor, no ZipMap), with ONNX Runtime's outputs as the reference,
in the node-test layout (tests/models_ml/NAME/model.onnx + test_data_set_0/{input,output}_N.pb).

Deterministic: fixed seeds. Needs scikit-learn and skl2onnx (tools/requirements-ml.txt).
Usage: tools/make_ml_models.py [OUT_DIR]   (default tests/models_ml)"""
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from skl2onnx import to_onnx
from sklearn.cluster import KMeans
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                              RandomForestClassifier, RandomForestRegressor)
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Binarizer, MaxAbsScaler, Normalizer, OneHotEncoder, StandardScaler
from sklearn.svm import SVC, SVR, LinearSVC, NuSVR, OneClassSVM
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

OPSETS = {"": 17, "ai.onnx.ml": 3}


def with_thresholds(model, x, rows=32):
    """x plus rows whose features sit exactly on the trees' thresholds (where <= and < differ)."""
    pairs = {}
    for node in model.graph.node:
        if not node.op_type.startswith("TreeEnsemble"):
            continue
        a = {at.name: at for at in node.attribute}
        for f, v, m in zip(a["nodes_featureids"].ints, a["nodes_values"].floats,
                           a["nodes_modes"].strings):
            if m != b"LEAF":
                pairs.setdefault(f, []).append(v)
    if not pairs:
        return x
    extra = np.repeat(x[:1], rows, axis=0).copy()
    for r in range(rows):
        for f, vals in pairs.items():
            extra[r, f] = vals[(r * 7 + f) % len(vals)]
    return np.concatenate([x, extra.astype(x.dtype)])


def save(out_dir, name, model, x):
    """x: one input's rows, or {input name: array} for several inputs."""
    if isinstance(x, dict):
        return save_feeds(out_dir, name, model, x)
    x = with_thresholds(model, x)
    return save_feeds(out_dir, name, model, {model.graph.input[0].name: x})


def save_feeds(out_dir, name, model, feeds):
    # converters list their opset imports in no fixed order: sort them so that a
    # regeneration rewrites no unchanged model
    imports = sorted(model.opset_import, key=lambda o: o.domain)
    del model.opset_import[:]
    model.opset_import.extend(imports)
    model.graph.name = name  # onnxmltools names graphs with a random UUID
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    for i, inp in enumerate(sess.get_inputs()):
        if isinstance(feeds[inp.name], dict):  # a map input
            t = map_proto(feeds[inp.name], inp.name)
        else:
            t = numpy_helper.from_array(feeds[inp.name], inp.name)
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for i, (o, arr) in enumerate(zip(sess.get_outputs(), outs)):
        if isinstance(arr, list):  # ZipMap: a sequence of maps (class label -> probability)
            t = zipmap_proto(arr, o.name)
        else:
            t = numpy_helper.from_array(np.asarray(arr), o.name)
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    print(f"{name}: {os.path.getsize(os.path.join(d, 'model.onnx'))} bytes, outputs "
          + ", ".join(f"{o.name}[{len(a)} maps]" if isinstance(a, list) else
                      f"{o.name}{list(np.asarray(a).shape)}" for o, a in zip(sess.get_outputs(), outs)))


def zipmap_proto(maps, name):
    """A list of dicts (label -> probability) as a SequenceProto of MapProtos (numpy_helper's
    from_dict does not take string keys)."""
    seq = onnx.SequenceProto(name=name, elem_type=onnx.SequenceProto.MAP)
    for d in maps:
        seq.map_values.append(map_proto(d))
    return seq


def map_proto(d, name=""):
    """A dict (int64 or string keys, float values) as a MapProto."""
    mp = onnx.MapProto(name=name) if name else onnx.MapProto()
    keys = list(d.keys())
    if isinstance(keys[0], str):
        mp.key_type = TensorProto.STRING
        mp.string_keys.extend(k.encode() for k in keys)
    else:
        mp.key_type = TensorProto.INT64
        mp.keys.extend(int(k) for k in keys)
    mp.values.CopyFrom(numpy_helper.from_list([np.array(d[k], np.float32) for k in keys]))
    return mp


def ml_model(nodes, inputs, outputs, ml_opset=2):
    g = helper.make_graph(nodes, "ml", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", ml_opset)],
                          producer_name="tandem-tools")
    m.ir_version = 8
    return m


def hand_made(out_dir, rng):
    """Encoders that converters write but scikit-learn models here do not exercise."""
    T = TensorProto
    vi = helper.make_tensor_value_info
    words = np.array(["a", "bb", "c", "zz", "", "bb"], dtype=object).reshape(2, 3)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_strings=["c", "a", "bb"], values_int64s=[30, 10, 20],
                            default_int64=-7)
    save(out_dir, "ml_label_encoder_str_int", ml_model([node], [vi("x", T.STRING, [2, 3])],
                                                       [vi("y", T.INT64, [2, 3])]), words)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_int64s=[5, -1, 9], values_strings=["five", "minus", "nine"])
    save(out_dir, "ml_label_encoder_int_str", ml_model([node], [vi("x", T.INT64, [7])],
                                                       [vi("y", T.STRING, [7])]),
         np.array([9, 5, 0, -1, 9, 3, 5], dtype=np.int64))
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_floats=[0.5, -2.0, 7.25], values_floats=[1.0, 2.0, 3.0],
                            default_float=-1.5)
    save(out_dir, "ml_label_encoder_float", ml_model([node], [vi("x", T.FLOAT, [6])],
                                                     [vi("y", T.FLOAT, [6])]),
         np.array([7.25, 0.5, 0.25, -2.0, 3.0, 0.5], dtype=np.float32))
    node = helper.make_node("CategoryMapper", ["x"], ["y"], domain="ai.onnx.ml",
                            cats_strings=["cat", "dog", "eel"], cats_int64s=[11, 22, 33],
                            default_int64=-3)
    save(out_dir, "ml_category_mapper_str_int", ml_model([node], [vi("x", T.STRING, [5])],
                                                         [vi("y", T.INT64, [5])]),
         np.array(["dog", "eel", "cow", "cat", "dog"], dtype=object))
    node = helper.make_node("CategoryMapper", ["x"], ["y"], domain="ai.onnx.ml",
                            cats_strings=["cat", "dog", "eel"], cats_int64s=[11, 22, 33],
                            default_string="none")
    save(out_dir, "ml_category_mapper_int_str", ml_model([node], [vi("x", T.INT64, [2, 2])],
                                                         [vi("y", T.STRING, [2, 2])]),
         np.array([[33, 0], [11, 22]], dtype=np.int64))
    node = helper.make_node("FeatureVectorizer", ["a", "b"], ["y"], domain="ai.onnx.ml",
                            inputdimensions=[3, 4])
    save(out_dir, "ml_feature_vectorizer", ml_model([node], [vi("a", T.FLOAT, [4, 3]),
                                                             vi("b", T.FLOAT, [4, 2])],
                                                    [vi("y", T.FLOAT, [4, 7])]),
         {"a": rng.integers(-5, 5, size=(4, 3)).astype(np.float32),
          "b": rng.standard_normal((4, 2)).astype(np.float32)})


def boosters(out_dir, xc, yc, xb, yb, xr, yr, test):
    """LightGBM and XGBoost models converted with onnxmltools (skipped when not installed)."""
    try:
        import lightgbm
        import onnxmltools
        import xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType
    except ImportError as e:
        print(f"boosters skipped: {e}")
        return
    ft = lambda x: [("input", FloatTensorType([None, x.shape[1]]))]  # noqa: E731
    m = lightgbm.LGBMClassifier(n_estimators=30, num_leaves=15, verbose=-1, n_jobs=1, deterministic=True,
                                random_state=0).fit(xc[:-64], yc[:-64])
    onx = onnxmltools.convert_lightgbm(m, initial_types=ft(xc), zipmap=False, target_opset=15)
    save(out_dir, "ml_lightgbm_multiclass", onx, test(xc))
    m = lightgbm.LGBMClassifier(n_estimators=30, num_leaves=15, verbose=-1, n_jobs=1, deterministic=True,
                                random_state=0).fit(xb[:-64], yb[:-64])
    onx = onnxmltools.convert_lightgbm(m, initial_types=ft(xb), zipmap=False, target_opset=15)
    save(out_dir, "ml_lightgbm_binary", onx, test(xb))
    m = lightgbm.LGBMRegressor(n_estimators=40, num_leaves=15, verbose=-1, n_jobs=1, deterministic=True,
                               random_state=0).fit(xr[:-64], yr[:-64])
    onx = onnxmltools.convert_lightgbm(m, initial_types=ft(xr), target_opset=15)
    save(out_dir, "ml_lightgbm_regressor", onx, test(xr))
    m = xgboost.XGBClassifier(n_estimators=30, max_depth=4, random_state=0, n_jobs=1).fit(xc[:-64], yc[:-64])
    onx = onnxmltools.convert_xgboost(m, initial_types=ft(xc), target_opset=15)
    save(out_dir, "ml_xgboost_multiclass", onx, test(xc))
    m = xgboost.XGBClassifier(n_estimators=30, max_depth=4, random_state=0, n_jobs=1).fit(xb[:-64], yb[:-64])
    onx = onnxmltools.convert_xgboost(m, initial_types=ft(xb), target_opset=15)
    save(out_dir, "ml_xgboost_binary", onx, test(xb))
    m = xgboost.XGBRegressor(n_estimators=40, max_depth=4, random_state=0, n_jobs=1).fit(xr[:-64], yr[:-64])
    onx = onnxmltools.convert_xgboost(m, initial_types=ft(xr), target_opset=15)
    save(out_dir, "ml_xgboost_regressor", onx, test(xr))


def svms(out_dir, xc, yc, xb, yb, xr, yr, test):
    """Support vector machines: scikit-learn's (SVMClassifier / SVMRegressor, LinearSVC as a
    LinearClassifier) and hand-made ones for what converters do not write (the linear form of
    SVMClassifier, one_class, int64 rows)."""
    nozip = {"options": {"zipmap": False}}
    m = SVC().fit(xc[:-64], yc[:-64])
    save(out_dir, "ml_svc_rbf_multiclass", convert(m, xc, **nozip), test(xc))
    m = SVC(probability=True, random_state=0).fit(xb[:-64], yb[:-64])
    save(out_dir, "ml_svc_proba_binary", convert(m, xb, **nozip), test(xb))
    x4, y4 = make_classification(n_samples=400, n_features=6, n_informative=5, n_redundant=0,
                                 n_classes=4, random_state=5)
    x4 = x4.astype(np.float32)
    m = SVC(probability=True, random_state=0).fit(x4[:-64], y4[:-64])
    save(out_dir, "ml_svc_proba_multiclass", convert(m, x4, **nozip), test(x4))
    m = SVC(kernel="poly", degree=2, probability=True, random_state=0).fit(x4[:-64], y4[:-64])
    save(out_dir, "ml_svc_poly_proba_multiclass", convert(m, x4, **nozip), test(x4))
    ys = np.array(["no", "yes"])[yb]
    m = SVC(kernel="linear").fit(xb[:-64], ys[:-64])
    save(out_dir, "ml_svc_linear_string_labels", convert(m, xb, **nozip), test(xb))
    m = SVC(kernel="sigmoid", gamma=0.02).fit(xc[:-64], yc[:-64])
    save(out_dir, "ml_svc_sigmoid_multiclass", convert(m, xc, **nozip), test(xc))
    m = LinearSVC(random_state=0).fit(xc[:-64], yc[:-64])
    save(out_dir, "ml_linear_svc", convert(m, xc), test(xc))
    m = SVR().fit(xr[:-64], yr[:-64])
    save(out_dir, "ml_svr_rbf", convert(m, xr), test(xr))
    m = NuSVR(kernel="poly", degree=3).fit(xr[:-64], yr[:-64])
    save(out_dir, "ml_nusvr_poly", convert(m, xr), test(xr))
    m = OneClassSVM(nu=0.2).fit(xr[:-64])
    save(out_dir, "ml_one_class_svm", convert(m, xr), test(xr))

    T = TensorProto
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(17)
    F = 5
    x = rng.standard_normal((16, F)).astype(np.float32)
    coef = rng.standard_normal(3 * F).astype(np.float32)
    node = helper.make_node("SVMClassifier", ["x"], ["y", "z"], domain="ai.onnx.ml",
                            classlabels_strings=["a", "b", "c"], coefficients=coef.tolist(),
                            rho=[0.25], kernel_type="RBF", kernel_params=[0.5, 0.0, 3.0],
                            post_transform="SOFTMAX")
    save(out_dir, "ml_svm_linear_form_softmax",
         ml_model([node], [vi("x", T.FLOAT, [None, F])],
                  [vi("y", T.STRING, [None]), vi("z", T.FLOAT, [None, 3])], ml_opset=1), x)
    for name, c in (("mixed", coef[:2 * F]), ("positive", np.abs(coef[:2 * F]) * 0.1)):
        node = helper.make_node("SVMClassifier", ["x"], ["y", "z"], domain="ai.onnx.ml",
                                classlabels_ints=[4, 9], coefficients=c.tolist(), rho=[0.1],
                                kernel_params=[0.0, 0.0, 0.0], post_transform="LOGISTIC")
        xi = rng.integers(-3, 4, size=(16, F)).astype(np.int64)
        save(out_dir, f"ml_svm_linear_form_binary_{name}",
             ml_model([node], [vi("x", T.INT64, [None, F])],
                      [vi("y", T.INT64, [None]), vi("z", T.FLOAT, [None, 2])], ml_opset=1), xi)
    sv = rng.standard_normal((7, F)).astype(np.float32)
    node = helper.make_node("SVMRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_supports=7,
                            support_vectors=sv.ravel().tolist(), kernel_type="POLY",
                            kernel_params=[0.3, 1.0, 2.0], one_class=1,
                            coefficients=rng.standard_normal(7).astype(np.float32).tolist(),
                            rho=[4.5])
    save(out_dir, "ml_svm_regressor_one_class",
         ml_model([node], [vi("x", T.FLOAT, [None, F])], [vi("y", T.FLOAT, [None, 1])],
                  ml_opset=1), x)
    node = helper.make_node("SVMRegressor", ["x"], ["y"], domain="ai.onnx.ml",
                            coefficients=coef[:F].tolist(), rho=[1.5],
                            kernel_params=[0.0, 0.0, 0.0])
    save(out_dir, "ml_svm_regressor_linear_form",
         ml_model([node], [vi("x", T.FLOAT, [None, F])], [vi("y", T.FLOAT, [None, 1])],
                  ml_opset=1), x)
    # support vectors with post transforms: over the pair scores (3 classes, double rows),
    # and ignored between two classes but for [1 - s, s]
    for name, per, labels, post, kern, params in (
            ("ml_svm_svc_logistic_double", [2, 3, 2], ["x", "y", "z"], "LOGISTIC", "RBF",
             [0.1, 0.0, 0.0]),
            ("ml_svm_svc_binary_softmax", [3, 2], [7, 8], "SOFTMAX", "POLY", [0.4, 0.5, 3.0])):
        V, C = sum(per), len(per)
        lab = ({"classlabels_strings": labels} if isinstance(labels[0], str)
               else {"classlabels_ints": labels})
        node = helper.make_node(
            "SVMClassifier", ["x"], ["y", "z"], domain="ai.onnx.ml", vectors_per_class=per,
            support_vectors=rng.standard_normal(V * F).astype(np.float32).tolist(),
            coefficients=rng.standard_normal((C - 1) * V).astype(np.float32).tolist(),
            rho=(rng.standard_normal(C * (C - 1) // 2) * 0.3).astype(np.float32).tolist(),
            kernel_type=kern, kernel_params=params, post_transform=post, **lab)
        dt, xt = (T.DOUBLE, x.astype(np.float64)) if C > 2 else (T.FLOAT, x)
        ycol = (T.STRING if isinstance(labels[0], str) else T.INT64)
        save(out_dir, name, ml_model([node], [vi("x", dt, [None, F])],
                                     [vi("y", ycol, [None]),
                                      vi("z", T.FLOAT, [None, 3 if C > 2 else 2])],
                                     ml_opset=1), xt)


def pipelines(out_dir):
    """A scikit-learn pipeline with one-hot encoding: categorical columns (small integers)
    one-hot encoded next to scaled numeric ones (a ColumnTransformer), then a classifier."""
    from sklearn.compose import ColumnTransformer
    rng = np.random.default_rng(11)
    n = 400
    cat = rng.integers(0, 4, size=(n, 2)).astype(np.float32)
    num = rng.standard_normal((n, 3)).astype(np.float32)
    x = np.concatenate([cat, num], axis=1)
    y = ((cat[:, 0] == 1) ^ (num[:, 0] > 0.3)).astype(np.int64) + (cat[:, 1] == 3)
    pre = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                             ("num", StandardScaler(), [2, 3, 4])])
    x[-8:, 1] = 7  # a category the encoder never saw: zeros
    m = make_pipeline(pre, LogisticRegression(max_iter=500)).fit(x[:-64], y[:-64])
    save(out_dir, "ml_pipeline_onehot_logistic", convert(m, x, options={"zipmap": False}), x[-64:])
    m = make_pipeline(pre, RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0)).fit(
        x[:-64], y[:-64])
    onx = convert(m, x, options={"zipmap": False})  # the trees read encoded columns: no threshold rows
    save_feeds(out_dir, "ml_pipeline_onehot_random_forest", onx, {onx.graph.input[0].name: x[-64:]})


def convert(est, x, **kw):
    return to_onnx(est, x[:1], target_opset=OPSETS, **kw)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models_ml")
    rng = np.random.default_rng(7)
    xc, yc = make_classification(n_samples=600, n_features=12, n_informative=8, n_classes=3,
                                 random_state=1)
    xc = xc.astype(np.float32)
    xb, yb = make_classification(n_samples=600, n_features=10, random_state=2)
    xb = xb.astype(np.float32)
    xr, yr = make_regression(n_samples=600, n_features=9, n_targets=1, noise=0.5, random_state=3)
    xr = xr.astype(np.float32)
    xr2, yr2 = make_regression(n_samples=600, n_features=7, n_targets=3, random_state=4)
    xr2 = xr2.astype(np.float32)
    test = lambda x: x[-64:]  # noqa: E731  rows the estimators did not see
    nozip = {"options": {"zipmap": False}}

    m = RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0).fit(xc[:-64], yc[:-64])
    save(out_dir, "ml_random_forest_multiclass", convert(m, xc, **nozip), test(xc))
    m = RandomForestClassifier(n_estimators=15, max_depth=5, random_state=0).fit(xb[:-64], yb[:-64])
    save(out_dir, "ml_random_forest_binary", convert(m, xb, **nozip), test(xb))
    m = GradientBoostingClassifier(n_estimators=25, max_depth=3, random_state=0).fit(xc[:-64], yc[:-64])
    save(out_dir, "ml_gradient_boosting_multiclass", convert(m, xc, **nozip), test(xc))
    m = GradientBoostingClassifier(n_estimators=25, max_depth=3, random_state=0).fit(xb[:-64], yb[:-64])
    save(out_dir, "ml_gradient_boosting_binary", convert(m, xb, **nozip), test(xb))
    ys = np.array(["cat", "dog", "eel"])[yc]
    m = DecisionTreeClassifier(max_depth=7, random_state=0).fit(xc[:-64], ys[:-64])
    save(out_dir, "ml_decision_tree_string_labels", convert(m, xc, **nozip), test(xc))
    m = RandomForestRegressor(n_estimators=12, max_depth=6, random_state=0).fit(xr[:-64], yr[:-64])
    save(out_dir, "ml_random_forest_regressor", convert(m, xr), test(xr))
    m = GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0).fit(xr[:-64], yr[:-64])
    save(out_dir, "ml_gradient_boosting_regressor", convert(m, xr), test(xr))
    m = DecisionTreeRegressor(max_depth=6, random_state=0).fit(xr2[:-64], yr2[:-64])
    save(out_dir, "ml_decision_tree_multitarget", convert(m, xr2), test(xr2))
    m = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(xc[:-64], yc[:-64])
    save(out_dir, "ml_scaler_logistic_multiclass", convert(m, xc, **nozip), test(xc))
    m = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(xb[:-64], yb[:-64])
    save(out_dir, "ml_scaler_logistic_binary", convert(m, xb, **nozip), test(xb))
    m = LogisticRegression(max_iter=500).fit(xc[:-64], ys[:-64])
    save(out_dir, "ml_logistic_string_labels", convert(m, xc, **nozip), test(xc))
    m = make_pipeline(StandardScaler(), LinearRegression()).fit(xr2[:-64], yr2[:-64])
    save(out_dir, "ml_scaler_linear_regression", convert(m, xr2), test(xr2))
    xn = xr.copy()
    xn[rng.random(xn.shape) < 0.1] = np.nan
    m = make_pipeline(SimpleImputer(strategy="mean"), MaxAbsScaler(), Normalizer(norm="l2"),
                      Binarizer(threshold=0.05)).fit(xn[:-64])
    save(out_dir, "ml_impute_scale_normalize_binarize", convert(m, xn), test(xn))
    m = KMeans(n_clusters=4, n_init=3, random_state=0).fit(xc[:-64])
    save(out_dir, "ml_kmeans", convert(m, xc), test(xc))
    boosters(out_dir, xc, yc, xb, yb, xr, yr, test)
    # encoders
    cats = rng.integers(0, 6, size=(200, 2)).astype(np.int64)
    m = OneHotEncoder(handle_unknown="ignore").fit(cats[:150] % 5)  # 5 is unknown: zeros
    save(out_dir, "ml_one_hot_int64", convert(m, cats), cats[150:])
    words = np.array(["red", "green", "blue", "teal"])[rng.integers(0, 4, size=(80, 1))]
    m = OneHotEncoder(handle_unknown="ignore").fit(words[:60][words[:60] != "teal"].reshape(-1, 1))
    save(out_dir, "ml_one_hot_strings", convert(m, words), words[60:])
    hand_made(out_dir, rng)
    pipelines(out_dir)
    for norm in ("l1", "max"):
        m = Normalizer(norm=norm).fit(xr[:-64])
        save(out_dir, f"ml_normalizer_{norm}", convert(m, xr), test(xr))
    svms(out_dir, xc, yc, xb, yb, xr, yr, test)
    zipmaps(out_dir, xc, yc, xb, yb, test)
    dict_vectorizers(out_dir)


def dict_vectorizers(out_dir):
    """DictVectorizer on a map input (string and int64 keys; one key outside the vocabulary)."""
    for kind, vocab, feed_keys in (
            ("strings", ["a", "b", "c", "d"], ["c", "a", "zz"]),
            ("int64", [5, 1, 9], [9, 5, 7])):
        if kind == "strings":
            key_t, attr = TensorProto.STRING, {"string_vocabulary": vocab}
        else:
            key_t, attr = TensorProto.INT64, {"int64_vocabulary": vocab}
        mtype = helper.make_map_type_proto(key_t, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
        node = helper.make_node("DictVectorizer", ["X"], ["Y"], domain="ai.onnx.ml", **attr)
        m = ml_model([node], [helper.make_value_info("X", mtype)],
                     [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, len(vocab)])], ml_opset=1)
        feeds = {"X": {k: float(i + 1) * 0.5 for i, k in enumerate(feed_keys)}}
        save_feeds(out_dir, f"ml_dict_vectorizer_{kind}", m, feeds)


def zipmaps(out_dir, xc, yc, xb, yb, test):
    """Classifiers converted with ZipMap on (skl2onnx's default): probabilities as a sequence
    of maps, int64 and string class labels."""
    m = RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0).fit(xc[:-64], yc[:-64])
    save(out_dir, "ml_zipmap_random_forest_int", convert(m, xc), test(xc))
    ys = np.array(["no", "yes"])[yb]
    m = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(xb[:-64], ys[:-64])
    save(out_dir, "ml_zipmap_logistic_strings", convert(m, xb), test(xb))


if __name__ == "__main__":
    main()

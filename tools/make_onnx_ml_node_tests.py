#!/usr/bin/env python3
"""The ONNX node tests of the ai.onnx.ml domain, written out in the node-test layout
(tests/models_onnx_ml/NAME/model.onnx + test_data_set_N/{input,output}_K.pb).

Neither Debian's libonnx-testdata nor the onnx wheel ships their data: the ONNX source
distribution on PyPI carries only the generators (onnx/backend/test/case/node/ai_onnx_ml/*.py,
the same files as in the installed onnx package), so this runs those generators with the
installed onnx (1.23, as pinned in tools/requirements.txt) and saves what they expect.
Usage: tools/make_onnx_ml_node_tests.py [OUT_DIR]   (default tests/models_onnx_ml)"""
import os
import shutil
import sys
import warnings

from onnx import numpy_helper
from onnx.backend.test.case import node

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests",
                                                             "models_onnx_ml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in node.collect_testcases(None) if c.name.startswith("test_ai_onnx_ml_")]
    shutil.rmtree(out, ignore_errors=True)
    for c in cases:
        d = os.path.join(out, c.name)
        os.makedirs(d)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(c.model.SerializeToString())
        for k, (ins, outs) in enumerate(c.data_sets):
            ds = os.path.join(d, f"test_data_set_{k}")
            os.makedirs(ds)
            for kind, vals, infos in (("input", ins, c.model.graph.input), ("output", outs, c.model.graph.output)):
                for i, (v, info) in enumerate(zip(vals, infos)):
                    with open(os.path.join(ds, f"{kind}_{i}.pb"), "wb") as f:
                        f.write(numpy_helper.from_array(v, info.name).SerializeToString())
        print(c.name)


if __name__ == "__main__":
    main()

"""bench/sklearn_exports.py's check (outputs against onnxruntime, creation and latency ratios),
run here on a model as skl2onnx writes a logistic regression (an open batch, ZipMap), built
with onnx.helper, and its comparison of labels, scores and maps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import sklearn_exports  # noqa: E402 (bench/ is not a package)


def logistic_regression(path: Path) -> None:
    """8 features, 3 classes: LinearClassifier (LOGISTIC), Normalizer L1, ZipMap."""
    rng = np.random.default_rng(0)
    ml = "ai.onnx.ml"
    nodes = [
        helper.make_node("LinearClassifier", ["X"], ["label", "raw"], domain=ml,
                         coefficients=rng.normal(size=24).tolist(), intercepts=[0.1, 0.2, 0.3],
                         classlabels_ints=[0, 1, 2], post_transform="LOGISTIC"),
        helper.make_node("Normalizer", ["raw"], ["probabilities"], domain=ml, norm="L1"),
        helper.make_node("ZipMap", ["probabilities"], ["output_probability"], domain=ml,
                         classlabels_int64s=[0, 1, 2]),
    ]
    maps = onnx.TypeProto()
    maps.sequence_type.elem_type.map_type.key_type = TensorProto.INT64
    maps.sequence_type.elem_type.map_type.value_type.tensor_type.elem_type = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "logreg", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_value_info("output_probability", maps)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ml, 1)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def test_a_default_export_matches_and_gets_its_ratios(tmp_path):
    logistic_regression(tmp_path / "logistic_regression.onnx")
    row = sklearn_exports.check_one(tmp_path / "logistic_regression.onnx", repeat=2)
    assert row["result"] == "match"
    assert row["creation_ratio"] > 0 and row["latency_ratio"] > 0
    assert set(row["latency_ms"]) == {"ep-host", "onnxruntime"}


def test_maps_and_labels_that_differ_are_named():
    want = [{0: 0.25, 1: 0.75}]
    assert sklearn_exports.same(want, [{0: 0.25, 1: 0.75}]) is None
    assert "map" in sklearn_exports.same(want, [{0: 0.5, 1: 0.5}])
    assert "keys" in sklearn_exports.same(want, [{0: 0.25, 2: 0.75}])
    assert sklearn_exports.same(np.array([1, 2]), np.array([1, 3])) == "labels differ"
    assert "shape" in sklearn_exports.same(np.zeros((2, 1)), np.zeros(2))
    assert "difference" in sklearn_exports.same(np.float32([1.0]), np.float32([1.1]))


def test_check_reports_every_model_and_writes_json(tmp_path):
    logistic_regression(tmp_path / "logistic_regression.onnx")
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(BENCH / "sklearn_exports.py"), "check", "--out",
                           str(tmp_path), "--repeat", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "1/1 match onnxruntime" in done.stdout
    assert json.loads(out.read_text())[0]["result"] == "match"

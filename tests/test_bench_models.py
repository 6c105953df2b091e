"""bench/models.py: the per-model report against onnxruntime (correctness by dtype, latency,
session creation and peak RSS ratios), run here on one tiny model built with onnx.helper."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BENCH = Path(__file__).resolve().parent.parent / "bench"
# bench/ is not a package: load the script by its path
_spec = importlib.util.spec_from_file_location("bench_models", BENCH / "models.py")
bench_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_models)


def test_floats_agree_within_the_tolerance_of_their_dtype():
    want = np.array([1000.0, -2.0, 3.0], np.float32)
    assert bench_models.outputs_agree([want], [want + np.float32(0.5)])[0]  # 5e-4 of 1000
    agree, why, worst = bench_models.outputs_agree([want], [want + np.float32(2.0)])
    assert not agree and "output 0: relative error 2.00e-03" in why
    assert worst == 2e-3
    half = want.astype(np.float16)
    assert bench_models.outputs_agree([half], [half + np.float16(8.0)])[0]  # 8e-3 of 1000


def test_integers_shapes_dtypes_and_nans_must_match_exactly():
    ints = np.array([1, 2, 3], np.int64)
    assert bench_models.outputs_agree([ints], [ints.copy()])[0]
    assert "int64 values differ" in bench_models.outputs_agree([ints], [ints + 1])[1]
    assert "shape (1, 3)" in bench_models.outputs_agree([ints], [ints[None]])[1]
    assert "dtype int32" in bench_models.outputs_agree([ints], [ints.astype(np.int32)])[1]
    nan = np.array([np.nan, 1.0], np.float32)
    assert bench_models.outputs_agree([nan], [nan.copy()])[0]
    assert "NaN" in bench_models.outputs_agree([nan], [np.array([1.0, 1.0], np.float32)])[1]
    assert "2 outputs" in bench_models.outputs_agree([ints], [ints, ints])[1]


def tiny_corpus(folder: Path) -> None:
    """One MatMul+Relu model and its index entry, as bench/corpus.py writes them."""
    weight = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
        initializer=[numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(folder / "tiny.onnx"))
    entry = {"path": "tiny.onnx", "group": "test", "outputs": ["z"],
             "inputs": [{"name": "x", "shape": [2, 8], "dtype": "float32", "low": 0,
                         "high": None, "fill": None}]}
    (folder / "index.json").write_text(json.dumps({"models": {"tiny": entry}}))


def test_the_report_runs_a_tiny_model_in_child_processes(tmp_path):
    tiny_corpus(tmp_path)
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(BENCH / "models.py"), "--out", str(tmp_path),
                           "--repeat", "3", "--creation", "1", "--json", str(report)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| tiny |" in done.stdout and "1/1 match onnxruntime, 0 wrong" in done.stdout
    result = json.loads(report.read_text())
    (row,) = result["rows"]
    assert row["correct"] is True and row["rel_err"] < 1e-6
    for key in ("latency_ratio", "creation_ratio", "memory_ratio", "memory_added_ratio"):
        assert row[key] > 0 and result["summary"][key]["n"] == 1
    for runtime in ("ep-host", "onnxruntime"):
        memory = row["memory"][runtime]
        assert memory["rss_peak"] >= memory["rss_before"] > 10 * 2**20


def test_an_unknown_model_name_is_refused(tmp_path):
    tiny_corpus(tmp_path)
    done = subprocess.run([sys.executable, str(BENCH / "models.py"), "--out", str(tmp_path),
                           "--only", "tiny,nope"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "nope" in done.stderr

"""Fuzzing: mutated real models end in a result or an ep-host error, never in a crash, a hang
or another exception. The engine is ``bench/fuzz.py`` (seeds, mutations, worker processes);
this file runs a fixed seed of a few hundred cases in the default run, and the full 10,000 with
``-m slow``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from ep_host import errors

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import fuzz  # noqa: E402 (bench/ is not a package)


@pytest.fixture(scope="module")
def seeds():
    return fuzz.seed_models()


def test_every_ep_host_error_derives_from_host_error():
    # PluginBaseException carries a plugin's SystemExit & co. inside the host, where it becomes
    # that provider's fault (a HostError); it is never what a user catches
    raised = [c for c in vars(errors).values()
              if isinstance(c, type) and issubclass(c, Exception)
              and c is not errors.PluginBaseException]
    assert len(raised) > 5
    assert all(issubclass(c, errors.HostError) for c in raised)


def test_the_seed_models_load_and_run_unmutated(seeds):
    from ep_host.discovery import Host

    host = Host.discover(["cpu"], strict=False)
    outcomes = {onnx.ModelProto.FromString(s).graph.name + f"#{i}": fuzz.check_case(0, s, host)[0]
                for i, s in enumerate(seeds)}
    # examples/custom_op.onnx's op has a kernel only in the example third-party EP
    expected = {name: "PlacementError" if name.startswith("custom_op#") else "result"
                for name in outcomes}
    assert outcomes == expected
    assert len(seeds) >= 20


def test_mutations_change_the_model_and_are_reproducible(seeds):
    cases = [fuzz.fuzz_case(3, i, seeds) for i in range(50)]
    assert cases == [fuzz.fuzz_case(3, i, seeds) for i in range(50)]
    unchanged = set(seeds)
    assert sum(case not in unchanged for case in cases) >= 45  # a few mutations are no-ops


def test_a_foreign_exception_is_reported_as_a_failure(seeds):
    class Broken:
        records = None  # placing reads records["cpu"]: a TypeError, not a HostError

    outcome, detail = fuzz.check_case(0, seeds[0], Broken())
    assert outcome == "foreign" and "TypeError" in detail


def test_300_fuzzed_models_in_worker_processes_end_in_a_result_or_an_ep_host_error():
    counts, failures = fuzz.run_fuzz(300, seed=20240, workers=2)
    assert failures == []
    assert sum(counts.values()) == 300
    assert counts["result"] > 0 and counts["ModelValidationError"] > 0


def test_a_worker_that_dies_is_counted_as_a_crash_and_replaced():
    # case -1 is no valid random seed: the worker raises outside check_case and dies
    counts, failures = fuzz.run_fuzz(3, seed=0, workers=1, start=-1)
    assert [(f["case"], f["outcome"]) for f in failures] == [(-1, "crash")]
    assert counts["crash"] == 1 and sum(counts.values()) == 3


@pytest.mark.slow
def test_10000_fuzzed_models_never_crash_hang_or_escape():
    counts, failures = fuzz.run_fuzz(10_000, seed=7, workers=2)
    assert failures == []
    assert sum(counts.values()) == 10_000


def test_feeds_match_the_declared_inputs():
    class Arg:
        def __init__(self, name, shape):
            from ep_host import dtype
            self.name, self.shape, self.type = name, shape, "tensor(float)"
            self.dtype = dtype(1)

    class Session:
        def get_inputs(self):
            return [Arg("x", [1, 3, "n"]), Arg("y", [])]

    feed = fuzz._feed(Session(), np.random.default_rng(0))
    assert feed["x"].shape == (1, 3, 2) and feed["x"].dtype == np.float32
    assert feed["y"].shape == ()

"""Calibration: measured kernel times fit per op family, stored in the user's cache directory
with the load they were measured under, and every calibrated provider's estimates follow the
stored profile (the CPU EP applies it itself; the host applies it to the others)."""

import json
import os
from pathlib import Path

import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import calibrate, calibration
from ep_host.calibrate import Case, Sample, compose, fit
from ep_host.calibration import Factors
from ep_host.capability import walk
from ep_host.cli import main
from ep_host.discovery import Host
from ep_host.loading import load_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    calibration.reload()
    yield tmp_path
    calibration.reload()


def add_matmul_model():
    return make_model(
        [helper.make_node("Add", ["x", "x"], ["s"], name="add"),
         helper.make_node("MatMul", ["s", "x"], ["y"], name="matmul")],
        [("x", TensorProto.FLOAT, [64, 64])], [("y", TensorProto.FLOAT, [64, 64])])


def cpu_estimates():
    host = Host.discover(["cpu"])
    table = walk(host, load_model(add_matmul_model()), ["cpu"])
    return {n: table.answers[n]["cpu"].cost.total_us for n in ("add", "matmul")}


def test_a_stored_profile_scales_the_cpu_eps_estimates_per_family(cache):
    raw = cpu_estimates()
    (cache / calibration.FILE_NAME).write_text(json.dumps({
        "schema": calibration.SCHEMA,
        "providers": {"cpu": {"families": {"elementwise": {"overhead_us": 10.0, "scale": 2.0,
                                                           "cases": 2}}}}}))
    calibration.reload()
    calibrated = cpu_estimates()
    assert calibrated["add"] == pytest.approx(10.0 + 2.0 * raw["add"])
    assert calibrated["matmul"] == pytest.approx(raw["matmul"])  # matmul was not calibrated


def test_calibrate_writes_the_profile_and_changes_estimates(cache):
    raw = cpu_estimates()
    cases = [Case("elementwise", f"Add[{n}]",
                  lambda n=n: calibrate.single_op_model("Add", [(n,), (n,)]))
             for n in (16, 65_536)]
    seen = []
    profile = calibrate.calibrate(["cpu"], cases, repeats=3,
                                  on_case=lambda p, c, r: seen.append((p, c)))
    assert seen == [("cpu", "Add[16]"), ("cpu", "Add[65536]")]
    stored = json.loads((cache / calibration.FILE_NAME).read_text())
    assert stored == profile and stored["schema"] == calibration.SCHEMA
    family = stored["providers"]["cpu"]["families"]["elementwise"]
    assert family["cases"] == 2 and family["scale"] > 0 and family["overhead_us"] >= 0
    assert [s["case"] for s in stored["providers"]["cpu"]["samples"]] == ["Add[16]", "Add[65536]"]
    expected = Factors(family["overhead_us"], family["scale"]).apply(raw["add"])
    assert cpu_estimates()["add"] == pytest.approx(expected)


def test_a_provider_that_declines_a_case_skips_it(cache):
    case = Case("elementwise", "Add[string]", lambda: _string_add())
    profile = calibrate.calibrate(["cpu"], [case], repeats=1)
    entry = profile["providers"]["cpu"]
    assert "elementwise" not in entry["families"]
    assert "got string" in entry["skipped"]["Add[string]"]


def _string_add():
    model = calibrate.single_op_model("Add", [(4,), (4,)])
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.elem_type = TensorProto.STRING
    return model


def test_fit_recovers_overhead_and_scale():
    samples = [Sample("p", "f", str(e), e, 5.0 + 0.5 * e) for e in (1.0, 10.0, 1000.0)]
    f = fit(samples)
    assert f.overhead_us == pytest.approx(5.0) and f.scale == pytest.approx(0.5)
    # a negative overhead is not a cost: fall back to a pure scale
    f = fit([Sample("p", "f", "a", 10.0, 1.0), Sample("p", "f", "b", 100.0, 100.0)])
    assert f.overhead_us == 0.0 and f.scale > 0


def test_a_compiling_providers_fit_is_a_pure_scale_on_its_larger_cases():
    # its launch is priced per partition: a per-node overhead would charge it again per node
    samples = [Sample("p", "f", str(e), e, 4.0 + 2.0 * e, partition=True)
               for e in (1.0, 50.0, 200.0)]
    f = fit(samples)
    assert f.overhead_us == 0.0
    assert f.scale == pytest.approx(((4 + 100) / 50 * (4 + 400) / 200) ** 0.5)
    # with only small cases, all of them count
    f = fit([Sample("p", "f", "a", 2.0, 4.0, partition=True)])
    assert (f.overhead_us, f.scale) == (0.0, pytest.approx(2.0))


def test_a_one_node_partition_is_measured_as_a_partition_and_a_node_as_a_node(cache):
    ort_ep = pytest.importorskip("ep_host_onnxruntime.provider")
    host = Host.discover()
    host.register(ort_ep, name="onnxruntime") if "onnxruntime" not in host.records else None
    case = Case("elementwise", "Relu", lambda: calibrate.single_op_model("Relu", [(4096,)]))
    compiled = calibrate.measure_case(case, "onnxruntime", repeats=3, host=host)
    plain = calibrate.measure_case(case, "cpu", repeats=3, host=host)
    assert compiled.partition and compiled.estimated_us > 0
    assert not plain.partition and plain.measured_us > 0


def test_recalibrating_composes_instead_of_compounding():
    old = Factors(3.0, 2.0)
    new = Factors(1.0, 0.5)  # fitted on estimates that already had `old` applied
    raw = 40.0
    assert compose(new, old).apply(raw) == pytest.approx(new.apply(old.apply(raw)))


def test_calibrate_command_rejects_an_unknown_provider(cache, capsys):
    assert main(["calibrate", "--providers", "nosuch"]) == 1
    assert "'nosuch' is not available" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Every calibrated provider's estimates follow its factors; the cache is the user's and
# records the load it was measured under.
# ---------------------------------------------------------------------------------------------


def relu_cases():
    return [Case("elementwise", f"Relu[{n}]",
                 lambda n=n: calibrate.single_op_model("Relu", [(n,)])) for n in (64, 65_536)]


def inline_host(*providers):
    host = Host.discover(["cpu"])
    for p in providers:
        host.register(p, name=p.name)
    return host


def relu_neg_model():
    return make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Neg", ["r"], ["y"], name="neg")],
        [("x", TensorProto.FLOAT, [64])], [("y", TensorProto.FLOAT, [64])])


def estimates(host, provider):
    table = walk(host, load_model(relu_neg_model()), [provider])
    return {n: table.answers[n][provider].cost.total_us for n in ("relu", "neg")}


def test_a_third_party_providers_estimates_follow_its_calibration(cache):
    host = inline_host(InlineProvider("inline", ops=("Relu", "Neg"), cost_us=1.0))
    assert estimates(host, "inline") == {"relu": 1.0, "neg": 1.0}
    profile = calibrate.calibrate(["inline"], relu_cases(), repeats=3, host=host)
    entry = profile["providers"]["inline"]
    assert entry["op_families"] == {"Relu": "elementwise"}
    family = entry["families"]["elementwise"]
    overall = entry["overall"]
    calibrated = estimates(host, "inline")
    # Relu was measured in the elementwise family; Neg (never measured) gets the overall fit
    assert calibrated["relu"] == pytest.approx(family["overhead_us"] + family["scale"] * 1.0)
    assert calibrated["neg"] == pytest.approx(overall["overhead_us"] + overall["scale"] * 1.0)
    assert calibrated != {"relu": 1.0, "neg": 1.0}
    # recalibrating fits the provider's own estimates again, not the calibrated ones
    again = calibrate.calibrate(["inline"], relu_cases(), repeats=3, host=host)
    assert [s["estimated_us"] for s in again["providers"]["inline"]["samples"]] == [
        pytest.approx(1.0), pytest.approx(1.0)]


def test_a_provider_that_applies_calibration_itself_is_not_scaled_twice(cache):
    mine = InlineProvider("mine", ops=("Relu", "Neg"), applies_calibration=True)
    other = InlineProvider("other", ops=("Relu", "Neg"))
    host = inline_host(mine, other)
    entry = {"families": {"elementwise": {"overhead_us": 1.0, "scale": 3.0, "cases": 2}},
             "op_families": {"Relu": "elementwise"},
             "overall": {"overhead_us": 0.0, "scale": 5.0, "cases": 2}}
    (cache / calibration.FILE_NAME).write_text(json.dumps({
        "schema": calibration.SCHEMA, "providers": {"mine": entry, "other": entry}}))
    calibration.reload()
    assert estimates(host, "mine") == {"relu": 1.0, "neg": 1.0}
    assert estimates(host, "other") == {"relu": pytest.approx(4.0), "neg": pytest.approx(5.0)}


def test_the_cache_is_the_users_unless_overridden(monkeypatch, tmp_path):
    import platformdirs

    monkeypatch.delenv("EP_HOST_CACHE_DIR", raising=False)
    assert calibration.profile_path().parent == Path(platformdirs.user_cache_dir("ep-host"))
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    assert calibration.profile_path() == tmp_path / calibration.FILE_NAME


def test_calibrate_records_when_and_under_what_load(cache):
    profile = calibrate.calibrate(["cpu"], relu_cases()[:1], repeats=1)
    entry = profile["providers"]["cpu"]
    assert entry["measured_at"].endswith("+00:00")
    load = entry["load"]
    assert load["cpus"] == os.cpu_count()
    assert len(load["load_before"]) == 3 and len(load["load_after"]) == 3
    others = max(load["load_before"][0], load["load_after"][0] - 1, 0.0)
    assert load["others_per_cpu"] == pytest.approx(others / load["cpus"], abs=0.01)
    assert load["busy"] == (load["others_per_cpu"] > calibration.BUSY_LOAD_PER_CPU)


@pytest.mark.parametrize("before, after, busy", [
    (0.2, 1.1, False),  # only the measuring process itself
    (1.5, 2.4, True),  # other processes were running before
    (0.1, 2.6, True),  # and they started while it measured
])
def test_a_machine_is_busy_above_half_a_cpu_of_other_load(before, after, busy):
    record = calibration.measured_under({"load": [before, 0, 0], "cpus": 2},
                                        {"load": [after, 0, 0], "cpus": 2})
    assert record["busy"] is busy


def test_calibrate_warns_when_busy_and_providers_shows_the_load(cache, capsys):
    assert main(["calibrate", "--providers", "example", "--repeats", "1"]) == 0
    err = capsys.readouterr().err
    stored = json.loads((cache / calibration.FILE_NAME).read_text())["providers"]["example"]
    warned = "warning: the machine was busy while measuring example" in err
    assert warned == stored["load"]["busy"]
    if warned:
        assert "re-run `ep-host calibrate --providers example` when the machine is idle" in err
    assert main(["providers", "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["example"]["calibration"] == {"measured_at": stored["measured_at"],
                                                "load": stored["load"]}
    assert listed["cpu"]["calibration"] is None
    assert main(["providers", "--format", "plain"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("example "))
    assert f"load {stored['load']['others_per_cpu']:.2f}/CPU of {os.cpu_count()}" in row


def test_the_busy_warning_names_the_load_and_the_command_to_rerun(capsys):
    from ep_host.cli_measure import warn_if_busy

    busy = calibration.measured_under({"load": [3.0, 0, 0], "cpus": 2},
                                      {"load": [3.5, 0, 0], "cpus": 2})
    warn_if_busy({"cpu": busy, "example": None}, "ep-host calibrate --providers cpu,example")
    err = capsys.readouterr().err
    assert "busy while measuring cpu:" in err and "load was 1.50 per CPU (2 CPUs" in err
    assert "re-run `ep-host calibrate --providers cpu,example` when the machine is idle" in err
    idle = calibration.measured_under({"load": [0.1, 0, 0], "cpus": 2},
                                      {"load": [1.0, 0, 0], "cpus": 2})
    warn_if_busy({"cpu": idle}, "ep-host calibrate")
    assert capsys.readouterr().err == ""

"""``explain`` summarises: a provider that declines every node is one line above the table, a
repeated decline is shown once with a count, and a per-provider summary closes the table;
``--all`` shows every answer."""

import io
import json
import os

import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper
from test_function_expansion import _local_function_model
from test_partitions import Compiler

from ep_host import InferenceSession
from ep_host.cli import main
from ep_host.report import Output, explain_dict, explain_summary, render_explain

F = TensorProto.FLOAT
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")
MISSING = "gpulib is not installed: pip install 'gpu-ep[cu12]'"


@pytest.fixture
def placement(host):
    """neg0 -> relu1 -> neg2 -> relu3 -> neg4 -> relu5; "gpu" is unavailable, "relus" claims
    (and compiles) only the Relus, cheaper than "cpu", which claims everything."""
    ops = ["Neg", "Relu"] * 3
    nodes = [helper.make_node(op, ["x" if i == 0 else f"t{i - 1}"], ["y" if i == 5 else f"t{i}"],
                              name=f"{op.lower()}{i}") for i, op in enumerate(ops)]
    model = make_model(nodes, [("x", F, [4])], [("y", F, [4])])
    host.register(InlineProvider("gpu", available=False, reason=MISSING), name="gpu")
    host.register(Compiler("relus", ops=("Relu",)), name="relus")
    host.register(InlineProvider("cpu", ops=("Neg", "Relu"), cost_us=5.0), name="cpu")
    session = InferenceSession(model.SerializeToString(),
                               providers=["gpu", "relus", "cpu"], host=host,
                               strategy="greedy", optimizations=())
    return session.placement


def explained(placement, **kwargs):
    text = io.StringIO()
    render_explain(Output(text, rich=False), placement.table, placement, **kwargs)
    return text.getvalue()


def test_an_unavailable_provider_is_one_line_above_the_table(placement):
    out = explained(placement)
    assert out.count(MISSING) == 1
    first = out.splitlines()[0]
    assert first.startswith("gpu: every listed node (6) declined [device]") and MISSING in first
    table = out.split("Summary per provider")[0].splitlines()[1:]
    assert not any(cell == "gpu" for line in table for cell in line.split())


def test_a_repeated_decline_is_shown_once_with_its_count(placement):
    out = explained(placement)
    reason = "Neg: relus only runs Relu"
    assert out.count(reason) == 1
    assert f"declined [op]: {reason} (the same for 2 more nodes)" in out
    # claims are never collapsed: every node keeps its chosen provider's row
    assert out.count("*relus") == 3 and out.count("*cpu") == 3


def test_all_shows_every_answer_as_one_row(placement):
    out = explained(placement, every=True)
    assert out.count(MISSING) == 6
    assert out.count("Neg: relus only runs Relu") == 3
    assert "the same for" not in out


def test_the_summary_counts_claims_choices_declines_and_compiled_partitions(placement):
    summary = explain_summary(placement.table, placement)
    assert summary["nodes"] == 6
    assert summary["providers"]["gpu"] == {
        "nodes": 6, "claimed": 0, "chosen": 0, "declined": {"device": 6},
        "compiled_partitions": 0, "compiled_nodes": 0}
    assert summary["providers"]["relus"] == {
        "nodes": 6, "claimed": 3, "chosen": 3, "declined": {"op": 3},
        "compiled_partitions": 3, "compiled_nodes": 3}  # each Relu sits between two Negs
    assert summary["providers"]["cpu"]["claimed"] == 6
    assert summary["providers"]["cpu"]["chosen"] == 3
    out = explained(placement)
    rows = {line.split()[0]: line for line in out.split("Summary per provider")[1].splitlines()}
    assert "3/6 (50.0%)" in rows["relus"] and "op 3" in rows["relus"]
    assert "3 partition(s) with a total of 3/6 nodes (50.0%)" in rows["relus"]
    assert "0/6 (0.0%)" in rows["gpu"] and "device 6" in rows["gpu"]
    assert "6/6 (100.0%)" in rows["cpu"]


def test_the_json_keeps_every_answer_and_adds_the_summary(placement):
    data = explain_dict(placement.table, placement, "chain")
    assert all(n["answers"]["gpu"]["reason"].endswith(MISSING) for n in data["nodes"])
    assert len(data["nodes"]) == 6
    assert data["summary"] == json.loads(json.dumps(explain_summary(placement.table, placement)))


def test_the_command_collapses_repeats_and_all_restores_them(capsys):
    # the example EP declines both FusedConvs and both MaxPools of the CNN in the same words
    assert main(["explain", CNN, "--providers", "cpu,example"]) == 0
    out = capsys.readouterr().out
    assert out.count("MaxPool: the example EP runs only") == 1
    assert "(the same for 1 more node)" in out and "Summary per provider (7 nodes" in out
    assert main(["explain", CNN, "--providers", "cpu,example", "--all"]) == 0
    out = capsys.readouterr().out
    assert out.count("MaxPool: the example EP runs only") == 2


def test_with_no_provider_a_function_body_is_not_listed_node_by_node(tmp_path, capsys,
                                                                     monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(_local_function_model().SerializeToString())
    monkeypatch.setenv("EP_HOST_PROVIDERS", "")
    assert main(["explain", str(path)]) == 1
    captured = capsys.readouterr()
    assert "swish::" not in captured.out and "swish::" not in captured.err
    assert "expanded into its function body: 4 nodes, none claimed" in captured.out
    assert "no provider is loaded" in captured.out
    assert "no provider is loaded" in captured.err and "relu, swish" in captured.err

"""Measured node times (``ep-host calibrate --model``): each node timed alone per provider,
stored by signature, and used by later walks in place of the providers' estimates."""

import json

import pytest
from hostkit import add_relu_model, make_model
from onnx import TensorProto, helper

from ep_host import InferenceSession, node_times
from ep_host.calibrate import calibrate_model
from ep_host.capability import walk
from ep_host.cli import main
from ep_host.discovery import Host
from ep_host.loading import load_model

F = TensorProto.FLOAT


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    return tmp_path


def relu_model(shape):
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                      [("x", F, shape)], [("y", F, shape)])


def test_measured_times_replace_the_estimates_of_those_nodes(cache, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_relu_model().SerializeToString())
    host = Host.discover(["cpu"])
    times = calibrate_model(str(path), ["cpu"], host=host)
    assert {t.node for t in times} == {"add", "relu"}
    assert all(t.measured_us is not None and t.measured_us >= 0 and not t.skipped for t in times)
    model = load_model(str(path))
    raw = walk(host, model, ["cpu"], measured=False)
    used = walk(host, model, ["cpu"])
    for t in times:
        assert used.answer(t.node, "cpu").cost.total_us == pytest.approx(t.measured_us)
        assert raw.answer(t.node, "cpu").cost.total_us == pytest.approx(t.estimated_us)
        # what the estimate said about the work is kept for reports
        assert used.answer(t.node, "cpu").cost.bytes_moved == \
            raw.answer(t.node, "cpu").cost.bytes_moved
    session = InferenceSession(str(path), providers=["cpu"], host=host)
    assert session.placement.total_us == pytest.approx(sum(t.measured_us for t in times))


def test_a_time_applies_only_to_the_same_signature(cache, tmp_path):
    host = Host.discover(["cpu"])
    path = tmp_path / "small.onnx"
    path.write_bytes(relu_model([4, 4]).SerializeToString())
    [timed] = calibrate_model(str(path), ["cpu"], host=host)
    same = walk(host, load_model(relu_model([4, 4]).SerializeToString()), ["cpu"])
    other = walk(host, load_model(relu_model([64, 64]).SerializeToString()), ["cpu"])
    assert same.answer("relu", "cpu").cost.total_us == pytest.approx(timed.measured_us)
    unmeasured = walk(host, load_model(relu_model([64, 64]).SerializeToString()), ["cpu"],
                      measured=False)
    assert other.answer("relu", "cpu").cost == unmeasured.answer("relu", "cpu").cost


def test_nodes_that_cannot_be_timed_alone_are_skipped_with_a_reason(cache, tmp_path):
    host = Host.discover(["cpu"])
    symbolic = relu_model(["n", 4])
    path = tmp_path / "sym.onnx"
    path.write_bytes(symbolic.SerializeToString())
    [t] = calibrate_model(str(path), ["cpu"], host=host)
    assert t.measured_us is None and "not static" in t.skipped
    # a Gather whose indices are an input: zeros are valid indices, so it is timed
    gather = make_model([helper.make_node("Gather", ["x", "i"], ["y"], name="g")],
                        [("x", F, [5, 3]), ("i", TensorProto.INT64, [2])], [("y", F, [2, 3])])
    path.write_bytes(gather.SerializeToString())
    [t] = calibrate_model(str(path), ["cpu"], host=host)
    assert t.measured_us is not None
    # an Expand to a shape input of zeros cannot run: skipped, with the kernel's error
    expand = make_model([helper.make_node("Expand", ["x", "s"], ["y"], name="e")],
                        [("x", F, [2, 3]), ("s", TensorProto.INT64, [2])], [("y", F, [2, 3])])
    path.write_bytes(expand.SerializeToString())
    [t] = calibrate_model(str(path), ["cpu"], host=host)
    assert t.measured_us is None and t.skipped


def test_ep_host_node_times_0_asks_for_the_estimates_alone(cache, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(relu_model([8, 8]).SerializeToString())
    host = Host.discover(["cpu"])
    calibrate_model(str(path), ["cpu"], host=host)
    model = load_model(str(path))
    monkeypatch.setenv("EP_HOST_NODE_TIMES", "0")
    assert walk(host, model, ["cpu"]).answer("relu", "cpu").cost == \
        walk(host, model, ["cpu"], measured=False).answer("relu", "cpu").cost


def test_nothing_is_read_when_no_time_was_ever_stored(cache):
    assert not node_times.store().path.exists()
    host = Host.discover(["cpu"])
    table = walk(host, load_model(relu_model([2, 2]).SerializeToString()), ["cpu"])
    assert node_times.apply(host, table, table.nodes) == 0


def test_the_calibrate_command_times_a_models_nodes(cache, tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_relu_model().SerializeToString())
    assert main(["calibrate", "--model", str(path), "--providers", "cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["node"] for r in rows) == ["add", "relu"]
    assert all(r["provider"] == "cpu" and r["measured_us"] is not None for r in rows)
    assert node_times.store().path.exists()


def test_a_transposed_view_is_timed_with_the_copy_its_reader_will_make():
    import numpy as np

    big = np.ones((512, 512), np.float32)
    view, = node_times.materialized((big.T,))
    assert view.flags.c_contiguous and np.array_equal(view, big.T)
    same, = node_times.materialized((big,))
    assert same is big  # already contiguous: nothing copied

"""Hostile and broken model files: each refused with a HostError that names the fault."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import onnx
import pytest
from hostkit import add_relu_model, make_model
from onnx import TensorProto, helper, numpy_helper

import ep_host.loading as loading_module
from ep_host import InferenceSession
from ep_host.errors import HostError, ModelLoadError, ModelValidationError, PlacementError
from ep_host.loading import load_model


def _bytes(model):
    return model.SerializeToString()


def _relu(initializers=(), nodes=None, outputs=None, **kwargs):
    return make_model(
        nodes or [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [("x", TensorProto.FLOAT, [2])], outputs or [("y", TensorProto.FLOAT, [2])],
        initializers=initializers, **kwargs)


def test_a_truncated_file_is_a_load_error(tmp_path):
    data = _bytes(add_relu_model())
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="cut.onnx"):
        load_model(path)


@pytest.mark.parametrize("message", [
    helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
    numpy_helper.from_array(np.arange(6, dtype=np.int64), "t"),
    helper.make_node("Relu", ["x"], ["y"]),
], ids=["graph", "tensor", "node"])
def test_another_message_serialized_instead_of_a_model_is_refused(message):
    with pytest.raises(ModelLoadError, match="not (an ONNX model|a valid ONNX protobuf)"):
        load_model(message.SerializeToString())


def test_a_model_without_ir_version_is_not_a_model():
    model = add_relu_model()
    model.ir_version = 0
    with pytest.raises(ModelLoadError, match="ir_version is 0"):
        load_model(_bytes(model))


def test_an_ir_version_newer_than_supported_gives_both_numbers():
    model = add_relu_model()
    model.ir_version = onnx.IR_VERSION + 5
    with pytest.raises(ModelValidationError,
                       match=f"IR version {onnx.IR_VERSION + 5}, newer than {onnx.IR_VERSION}"):
        load_model(_bytes(model))


def test_a_protobuf_over_2_gib_is_refused_before_parsing(tmp_path, monkeypatch):
    data = _bytes(add_relu_model())
    monkeypatch.setattr(loading_module, "MAX_PROTOBUF_BYTES", len(data) - 1)
    with pytest.raises(ModelLoadError, match="over protobuf's limit.*external data"):
        load_model(data)
    path = tmp_path / "big.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError, match="big.onnx.*over protobuf's limit"):
        load_model(path)


def _nested_if(depth):
    """An If whose then-branch is an If ... ``depth`` levels deep."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [out])
    for level in range(depth):
        node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body,
                                name=f"if{level}")
        body = helper.make_graph([node], f"level{level}", [], [out])
    return make_model(list(body.node), [("x", TensorProto.FLOAT, [2]), ("c", TensorProto.BOOL, [])],
                      [("y", TensorProto.FLOAT, [2])])


def test_nesting_deeper_than_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(loading_module, "MAX_GRAPH_DEPTH", 4)
    load_model(_nested_if(4))
    with pytest.raises(ModelValidationError, match="nested deeper than 4 levels"):
        load_model(_nested_if(6))


def test_an_unknown_op_is_a_placement_error_naming_it(host):
    from hostkit import InlineProvider
    host.register(InlineProvider("cpu"), "cpu")
    model = _relu(nodes=[helper.make_node("Frobnicate", ["x"], ["y"], name="frob",
                                          domain="acme")], domains=[("acme", 1)])
    with pytest.raises(PlacementError, match=r"frob \(acme::Frobnicate\)"):
        InferenceSession(_bytes(model), providers=["cpu"], host=host)


def test_an_unknown_domain_without_opset_import_is_a_validation_error():
    model = _relu(nodes=[helper.make_node("Frobnicate", ["x"], ["y"], name="frob",
                                          domain="acme")])
    with pytest.raises(ModelValidationError, match="'frob'.*domain 'acme'.*opset_import"):
        load_model(_bytes(model))


def test_a_value_with_two_producers_is_refused():
    model = _relu(nodes=[helper.make_node("Relu", ["x"], ["y"], name="a"),
                         helper.make_node("Neg", ["x"], ["y"], name="b")])
    with pytest.raises(ModelValidationError, match="'y' is written by node 'b'.*node 'a'"):
        load_model(_bytes(model))


def test_a_node_writing_a_graph_input_is_refused():
    model = _relu(nodes=[helper.make_node("Relu", ["x"], ["x"], name="a"),
                         helper.make_node("Relu", ["x"], ["y"], name="b")])
    with pytest.raises(ModelValidationError, match="'x' is written by node 'a'.*graph input"):
        load_model(_bytes(model))


def test_a_graph_output_listed_twice_is_refused():
    model = _relu(outputs=[("y", TensorProto.FLOAT, [2]), ("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ModelValidationError, match="output 'y' twice"):
        load_model(_bytes(model))


def _init_model(tensor):
    return make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                      [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])],
                      initializers=[tensor])


def test_raw_data_shorter_than_the_shape_is_refused(host):
    from hostkit import InlineProvider
    host.register(InlineProvider("cpu"), "cpu")
    t = numpy_helper.from_array(np.ones(2, np.float32), "w")
    t.raw_data = t.raw_data[:5]
    with pytest.raises(ModelValidationError, match="'w' of shape \\[2\\] needs 8 bytes.*holds 5"):
        InferenceSession(_bytes(_init_model(t)), providers=["cpu"], host=host)


def test_typed_data_that_does_not_fit_the_shape_is_refused():
    t = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    t.float_data.append(3.0)
    with pytest.raises(ModelValidationError, match="needs 2 values in float_data, it holds 3"):
        load_model(_bytes(_init_model(t)))


@pytest.mark.parametrize("dims, message", [
    ([-2], "negative dim"), ([2**40, 2**40], "overflows int64")])
def test_negative_or_enormous_dims_are_refused(dims, message):
    t = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    del t.dims[:]
    t.dims.extend(dims)
    with pytest.raises(ModelValidationError, match=message):
        load_model(_bytes(_init_model(t)))


def _external_model(location, length=8):
    t = helper.make_tensor("w", TensorProto.FLOAT, [2], [0.0, 0.0])
    del t.float_data[:]
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        t.external_data.add(key=k, value=v)
    return _init_model(t)


def _session(model, host, **kwargs):
    from hostkit import InlineProvider
    host.register(InlineProvider("cpu"), "cpu")
    return InferenceSession(model, providers=["cpu"], host=host, **kwargs)


def test_a_relative_symlink_to_a_device_file_is_refused(tmp_path, host):
    (tmp_path / "m").mkdir()
    os.symlink("../" * 30 + "dev/zero", tmp_path / "m" / "w.bin")
    path = tmp_path / "m" / "model.onnx"
    path.write_bytes(_bytes(_external_model("w.bin")))
    with pytest.raises(ModelLoadError, match="resolves outside the model's folder"):
        _session(str(path), host)


def test_a_fifo_inside_the_folder_is_refused_without_opening_it(tmp_path, host):
    os.mkfifo(tmp_path / "w.bin")  # opening it would block forever
    path = tmp_path / "model.onnx"
    path.write_bytes(_bytes(_external_model("w.bin")))
    with pytest.raises(ModelLoadError, match="not a regular file"):
        _session(str(path), host)


def test_bytes_with_external_data_never_read_the_working_directory(tmp_path, host, monkeypatch):
    (tmp_path / "w.bin").write_bytes(np.ones(2, np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match="without a base directory \\(pass base_dir=\\)"):
        _session(_bytes(_external_model("w.bin")), host)
    session = InferenceSession(_bytes(_external_model("w.bin")), providers=["cpu"], host=host,
                               base_dir=str(tmp_path))
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + 1)


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "ABSOLUTE",
                                      "link.bin"])
def test_loading_a_hostile_model_opens_nothing_outside_its_folder(tmp_path, host, location):
    from ep_host import cli

    outside = tmp_path / "secret.bin"
    outside.write_bytes(np.ones(2, np.float32).tobytes())
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    os.symlink(outside, folder / "link.bin")
    if location == "ABSOLUTE":
        location = str(outside)
    path = folder / "model.onnx"
    path.write_bytes(_bytes(_external_model(location)))
    opened: list[str] = []
    active = [True]

    def audit(event, args):
        if active[0] and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
            opened.append(os.path.realpath(os.fsdecode(args[0])))

    sys.addaudithook(audit)  # cannot be removed: ``active`` switches it off
    try:
        model = load_model(path)
        assert model.graph.nodes[0].name == "add"
        args = types.SimpleNamespace(model=str(path), providers=None, exclude=[],
                                     strategy="greedy", pin=[])
        cli._prepare(args)
        with pytest.raises(HostError, match="'w'"):
            _session(str(path), host)
    finally:
        active[0] = False
    root = str(tmp_path)
    bad = [p for p in opened if p.startswith(root) and not p.startswith(str(folder) + os.sep)]
    assert bad == []
    assert str(path) in opened  # the hook saw the model being read

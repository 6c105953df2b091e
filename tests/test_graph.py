"""Model loading and the read-only views handed to providers."""

import os
import sys

import numpy as np
import onnx
import pytest
from hostkit import add_relu_model, make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host.errors import ModelLoadError, ModelValidationError
from ep_host.loading import load_model


def test_since_version_resolves_from_the_models_opset():
    def softmax_at(opset):
        model = make_model([helper.make_node("Softmax", ["x"], ["y"])],
                           [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, None)],
                           opset=opset)
        return load_model(model).graph.nodes[0].since_version

    assert softmax_at(10) == 1
    assert softmax_at(12) == 11
    assert softmax_at(13) == 13
    assert softmax_at(21) == 13


def test_default_domain_is_normalised_and_attributes_get_schema_defaults():
    model = make_model([helper.make_node("Gemm", ["a", "b"], ["c"], transB=1)],
                       [("a", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.FLOAT, [4, 3])],
                       [("c", TensorProto.FLOAT, None)])
    node = load_model(model).graph.nodes[0]
    assert node.domain == "ai.onnx" and node.qualified_op == "Gemm"
    assert node.attributes == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}
    with pytest.raises(TypeError):
        node.attributes["alpha"] = 2.0


def test_nodes_with_the_same_plain_attributes_share_one_mapping_across_models():
    def conv_model(pads, opset=17):
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=pads, strides=[1, 1]),
                 helper.make_node("Conv", ["y", "w"], ["z"], pads=[0, 0, 0, 0], strides=[1, 1]),
                 helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                     np.ones(2, np.float32)))]
        return make_model(nodes, [("x", TensorProto.FLOAT, [1, 1, 6, 6]),
                                  ("w", TensorProto.FLOAT, [1, 1, 3, 3])],
                          [("z", TensorProto.FLOAT, None), ("c", TensorProto.FLOAT, None)],
                          opset=opset)

    first = load_model(conv_model([1, 1, 1, 1])).graph.nodes
    again = load_model(conv_model([1, 1, 1, 1])).graph.nodes
    other = load_model(conv_model([0, 0, 0, 0])).graph.nodes
    older = load_model(conv_model([1, 1, 1, 1], opset=10)).graph.nodes
    assert again[0].attributes is first[0].attributes  # another model, the same attributes
    assert other[0].attributes is first[1].attributes  # another node with those attributes
    assert other[0].attributes is not first[0].attributes
    assert older[0].since_version != first[0].since_version  # its own schema's defaults
    assert older[0].attributes is not first[0].attributes
    assert first[0].attributes["pads"] == (1, 1, 1, 1)
    assert first[0].attributes["strides"] == (1, 1)
    assert first[1].attributes["pads"] == (0, 0, 0, 0)
    # a tensor attribute is read per model: its array is that model's own
    assert again[2].attributes is not first[2].attributes
    with pytest.raises(TypeError):
        first[0].attributes["pads"] = (0,)


def test_values_carry_dtype_shape_and_inferred_types():
    node_add, node_relu = load_model(add_relu_model()).graph.nodes
    x, y = node_add.inputs
    assert (x.name, x.dtype.name, x.shape, x.is_constant) == ("x", "float32", (2, 3), False)
    # "s" is declared nowhere: shape inference fills it in
    assert node_relu.inputs[0].shape == (2, 3) and node_relu.inputs[0].dtype.name == "float32"


def test_omitted_optional_inputs_are_none():
    model = make_model([helper.make_node("Clip", ["x", "", "hi"], ["y"])],
                       [("x", TensorProto.FLOAT, [3]), ("hi", TensorProto.FLOAT, [])],
                       [("y", TensorProto.FLOAT, [3])])
    node = load_model(model).graph.nodes[0]
    assert node.inputs[1] is None and node.inputs[2].name == "hi"


def test_shape_inference_propagates_data_through_shape_subgraphs():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write a head split
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([4, 2], np.int64), "rest")]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [3, 8])], [("y", TensorProto.FLOAT, None)],
                       initializers=inits)
    reshape = load_model(model).graph.nodes[-1]
    assert reshape.outputs[0].shape == (3, 4, 2)


def test_a_model_declaring_every_value_it_makes_skips_shape_inference(monkeypatch):
    # onnx's inference could only agree with fully declared static types; where a dim is
    # symbolic (or a value undeclared) it still runs and its findings stand
    def refuse(*args, **kwargs):
        raise RuntimeError("inference ran")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refuse)
    declared = make_model([helper.make_node("Relu", ["x"], ["y"])],
                          [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])])
    loaded = load_model(declared)
    assert loaded.warnings == [] and loaded.graph.nodes[0].outputs[0].shape == (2, 3)
    symbolic = make_model([helper.make_node("Relu", ["x"], ["y"])],
                          [("x", TensorProto.FLOAT, ["n", 3])],
                          [("y", TensorProto.FLOAT, ["n", 3])])
    assert any("inference ran" in w for w in load_model(symbolic).warnings)


def test_attribute_array_reads_lists_of_numbers_as_the_attributes_hold_them():
    ids = list(range(100, 0, -1))  # long enough to be read through numpy for `attributes` too
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_int64s=ids, values_floats=[i / 3 for i in ids],
                            default_float=-1.5)
    model = make_model([node], [("x", TensorProto.INT64, [3])], [("y", TensorProto.FLOAT, [3])],
                       domains=[("ai.onnx.ml", 2)])
    view = load_model(model).graph.nodes[0]
    keys, values = view.attribute_array("keys_int64s"), view.attribute_array("values_floats")
    assert keys.dtype == np.int64 and keys.tolist() == ids
    assert values.dtype == np.float32 and values.tolist() == list(view.attributes["values_floats"])
    assert view.attributes["keys_int64s"] == tuple(ids)
    assert view.attribute_array("keys_int64s") is keys and not keys.flags.writeable
    assert view.attribute_array("default_float") == np.float32(-1.5)
    assert view.attribute_array("keys_strings") is None


def test_long_attribute_lists_are_the_tuples_the_model_holds_in_its_order():
    """Lists of 64 or more are made tuples when read; the mapping is the same as the others:
    its keys in order (the schema's defaults first), equal to the dict of its items, read-only."""
    def attributes(ids):
        node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                                keys_int64s=ids, values_strings=[f"v{i}" for i in ids],
                                default_string="none")
        model = make_model([node], [("x", TensorProto.INT64, [3])],
                           [("y", TensorProto.STRING, [3])], domains=[("ai.onnx.ml", 2)])
        return load_model(model).graph.nodes[0].attributes

    ids = list(range(100))
    attrs, short = attributes(ids), attributes(ids[:3])
    want = {"default_float": -0.0, "default_int64": -1, "default_string": "none",
            "keys_int64s": tuple(ids), "values_strings": tuple(f"v{i}" for i in ids)}
    assert {k: attrs[k] for k in want} == want
    assert type(attrs) is not type(short) and list(attrs) == list(short) == list(dict(short))
    assert len(attrs) == len(short)
    assert dict(attrs) == {**dict(attrs), **want} and attrs == dict(attrs)
    assert "keys_int64s" in attrs and "keys_strings" not in attrs
    assert attrs.get("keys_strings") is None and attrs.get("keys_strings", 1) == 1
    assert attrs["keys_int64s"] is attrs.get("keys_int64s")  # made once, then kept
    assert "v99" in repr(attrs)
    with pytest.raises(TypeError):
        attrs["keys_int64s"] = ()  # type: ignore[index]


def test_a_tree_ensemble_session_reads_its_tables_as_arrays_only():
    """Creating and running a tree ensemble's session never makes its tables tuples (which
    took 150-580 us of a scikit-learn export's creation): the check and the kernel read them
    as arrays."""
    from ep_host import InferenceSession
    from ep_host.attribute_lists import LongListAttributes

    n = 80  # 40 stumps: x[:, 0] <= i / 40 reaches leaf 1 (weight 1), else leaf 2 (weight -1)
    tree = {"nodes_treeids": [t for t in range(n // 2) for _ in range(3)],
            "nodes_nodeids": [0, 1, 2] * (n // 2), "nodes_featureids": [0] * (3 * n // 2),
            "nodes_values": [v for t in range(n // 2) for v in (t / 40, 0.0, 0.0)],
            "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"] * (n // 2),
            "nodes_truenodeids": [1, 0, 0] * (n // 2), "nodes_falsenodeids": [2, 0, 0] * (n // 2),
            "target_treeids": [t for t in range(n // 2) for _ in range(2)],
            "target_nodeids": [1, 2] * (n // 2), "target_ids": [0] * n,
            "target_weights": [1.0, -1.0] * (n // 2)}
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml",
                            n_targets=1, **tree)
    model = make_model([node], [("x", TensorProto.FLOAT, [None, 2])],
                       [("y", TensorProto.FLOAT, [None, 1])], domains=[("ai.onnx.ml", 3)])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    x = np.array([[0.0, 0], [0.5, 0], [1.0, 0]], np.float32)
    # stumps whose threshold t / 40 is at least x vote 1, the others -1
    want = [[sum(1.0 if v <= t / 40 else -1.0 for t in range(n // 2))] for v in x[:, 0]]
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want)
    attrs = session._model.graph.nodes[0].attributes
    assert isinstance(attrs, LongListAttributes)
    made = [name for name in tree if attrs._values[name] is not LongListAttributes.later()]
    assert made == []  # the modes too: looked up as bytes (NodeView.attribute_strings)
    assert attrs.pending("nodes_nodeids") and not attrs.pending("n_targets")
    assert session._model.graph.nodes[0].attribute_strings("nodes_modes") == (
        b"BRANCH_LEQ", b"LEAF", b"LEAF") * (n // 2)
    assert session._model.graph.nodes[0].attribute_strings("nodes_values") is None  # FLOATS


def test_symbolic_dims_are_strings():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [("x", TensorProto.FLOAT, ["batch", 4])], [("y", TensorProto.FLOAT, None)])
    node = load_model(model).graph.nodes[0]
    assert node.inputs[0].shape == ("batch", 4)
    assert node.outputs[0].shape == ("batch", 4)


def test_constants_are_read_only_and_read_on_demand():
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])],
                       [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, None)],
                       initializers=[numpy_helper.from_array(weight, "w")])
    w = load_model(model).graph.nodes[0].inputs[1]
    assert w.is_constant and w.shape == (2, 3)
    np.testing.assert_array_equal(w.value, weight)
    with pytest.raises(ValueError):
        w.value[0, 0] = 1.0


def _external_model(tmp_path, location, data=b"\0" * 24):
    tensor = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=location)
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])],
                       [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, None)],
                       initializers=[tensor])
    folder = tmp_path / "model"
    folder.mkdir()
    if data is not None:
        (folder / "weights.bin").write_bytes(data)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_external_data_is_not_opened_until_a_value_is_asked_for(tmp_path):
    path = _external_model(tmp_path, "weights.bin",
                           np.arange(6, dtype=np.float32).tobytes())
    opened = []

    def audit(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].endswith("weights.bin"):
            opened.append(args[0])

    sys.addaudithook(audit)
    model = load_model(str(path))
    w = model.graph.nodes[0].inputs[1]
    assert opened == []
    np.testing.assert_array_equal(w.value.ravel(), np.arange(6, dtype=np.float32))
    assert len(opened) == 1


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "/etc/passwd"])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 24)
    w = load_model(str(_external_model(tmp_path, location))).graph.nodes[0].inputs[1]
    with pytest.raises(ModelLoadError, match="w"):
        _ = w.value


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 24)
    path = _external_model(tmp_path, "link.bin", data=None)
    os.symlink(tmp_path / "secret.bin", path.parent / "link.bin")
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        _ = load_model(str(path)).graph.nodes[0].inputs[1].value


def test_external_data_needs_a_base_dir_for_bytes(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    w = load_model(path.read_bytes()).graph.nodes[0].inputs[1]
    with pytest.raises(ModelLoadError, match="base directory"):
        _ = w.value
    w = load_model(path.read_bytes(), base_dir=str(path.parent)).graph.nodes[0].inputs[1]
    assert w.value.shape == (2, 3)


def test_external_data_past_the_end_of_the_file_is_refused(tmp_path):
    w = load_model(str(_external_model(tmp_path, "weights.bin", data=b"\0" * 8))
                   ).graph.nodes[0].inputs[1]
    with pytest.raises(ModelLoadError, match="which has 8"):
        _ = w.value


def test_unreadable_files_name_the_file(tmp_path):
    with pytest.raises(ModelLoadError, match="missing.onnx"):
        load_model(str(tmp_path / "missing.onnx"))
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty"):
        load_model(str(empty))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xfe not a protobuf \x00\x01" * 10)
    with pytest.raises(ModelLoadError, match="garbage.onnx"):
        load_model(str(garbage))


def test_a_dangling_input_names_the_node_and_the_value():
    model = make_model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")],
                       [("x", TensorProto.FLOAT, [1])], [("y", TensorProto.FLOAT, None)])
    with pytest.raises(ModelValidationError, match="'r'.*'nowhere'"):
        load_model(model)


def test_a_cycle_names_its_nodes():
    model = make_model([helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                        helper.make_node("Relu", ["a"], ["b"], name="second")],
                       [("x", TensorProto.FLOAT, [1])], [("b", TensorProto.FLOAT, None)])
    with pytest.raises(ModelValidationError, match="cycle.*'first'.*'second'"):
        load_model(model)


def test_nodes_out_of_order_are_sorted_topologically():
    model = make_model([helper.make_node("Relu", ["s"], ["y"], name="second"),
                        helper.make_node("Neg", ["x"], ["s"], name="first")],
                       [("x", TensorProto.FLOAT, [1])], [("y", TensorProto.FLOAT, None)])
    assert [n.name for n in load_model(model).graph.nodes] == ["first", "second"]


def test_unnamed_nodes_get_unique_names():
    model = make_model([helper.make_node("Neg", ["x"], ["a"]),
                        helper.make_node("Neg", ["a"], ["b"])],
                       [("x", TensorProto.FLOAT, [1])], [("b", TensorProto.FLOAT, None)])
    assert [n.name for n in load_model(model).graph.nodes] == ["Neg_0", "Neg_1"]


def test_the_ops_looked_into_for_bodies_are_every_op_onnx_gives_a_graph_attribute():
    """Loading reads the attributes of onnx's own ops for bodies only where the op's schema
    has a graph attribute (graph.GRAPH_OPS); a newer onnx adding one fails here."""
    from ep_host.graph import GRAPH_OPS

    kinds = (onnx.defs.OpSchema.AttrType.GRAPH, onnx.defs.OpSchema.AttrType.GRAPHS)
    with_graphs = {s.name for s in onnx.defs.get_all_schemas_with_history()
                   if s.domain in ("", "ai.onnx.ml")
                   and any(a.type in kinds for a in s.attributes.values())}
    assert with_graphs == GRAPH_OPS


def test_a_graph_attribute_on_an_op_without_one_is_refused():
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "b", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    node = helper.make_node("Relu", ["x"], ["y"], name="relu", body=body)
    model = make_model([node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ModelValidationError, match="relu.*attribute 'body'"):
        load_model(model)


def test_control_flow_bodies_are_walked_with_outer_scope_visible():
    def branch(op, inputs, out, name):
        return helper.make_graph([helper.make_node(op, inputs, [out], name=name)], name, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])])

    then_branch = branch("Add", ["x", "x"], "t", "inner_add")
    else_branch = branch("Neg", ["x"], "e", "inner_neg")
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_branch,
                                         else_branch=else_branch, name="if")],
                       [("c", TensorProto.BOOL, []), ("x", TensorProto.FLOAT, [2])],
                       [("y", TensorProto.FLOAT, [2])])
    graph = load_model(model).graph
    names = [n.name for n in graph.walk()]
    assert names[0] == "if" and sorted(names[1:]) == ["inner_add", "inner_neg"]
    inner = graph.nodes[0].subgraphs["then_branch"].nodes[0]
    assert inner.since_version == 14 and inner.inputs[0].name == "x"
    assert inner.inputs[0].dtype.name == "float32"


def test_an_opset_newer_than_onnx_knows_is_refused_with_both_numbers():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [("x", TensorProto.FLOAT, [1])], [("y", TensorProto.FLOAT, None)])
    model.opset_import[0].version = 99
    with pytest.raises(ModelValidationError, match="99.*newer than"):
        load_model(model)


@pytest.mark.parametrize("count", [3, 40, 70])  # 70: made a tuple when read
def test_string_list_attributes_decode_each_string(count):
    """Long string lists are decoded in one pass; the answer must be each string's own decode,
    with invalid UTF-8 replaced and a string holding a NUL kept whole."""
    raw = [b"BRANCH_LEQ", b"LEAF", b"\xff\xfe", "é".encode(), b"\xc3", b"", b"a\x00b"]
    strings = (raw * count)[:count] if count > len(raw) else raw[:count]
    for with_nul in (False, True):
        values = [s for s in strings if with_nul or b"\x00" not in s]
        node = helper.make_node("Tagged", ["x"], ["y"], domain="test.strings", tags=values)
        model = load_model(make_model([node], [("x", TensorProto.FLOAT, [1])],
                                      [("y", TensorProto.FLOAT, [1])],
                                      domains=[("test.strings", 1)]))
        assert model.graph.nodes[0].attributes["tags"] == tuple(
            s.decode("utf-8", "replace") for s in values)


def test_what_paused_gc_built_is_in_the_oldest_generation_and_cycles_still_collected():
    import gc
    import weakref

    from ep_host.collector import paused_gc

    class Cycle:
        pass

    gc.collect()
    with paused_gc():
        assert not gc.isenabled()
        kept = [[i] for i in range(5000)]  # tracked objects, alive after the pause
        dropped = Cycle()
        dropped.self = dropped
        ref = weakref.ref(dropped)
        del dropped
    assert gc.isenabled() and len(kept) == 5000
    oldest = gc.get_objects(generation=2)  # not young objects a young collection would scan
    assert any(o is kept[0] for o in oldest) and any(o is kept[-1] for o in oldest)
    del oldest  # it holds every object of the generation, the dropped cycle too
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def test_paused_gc_leaves_the_programs_own_frozen_objects_frozen():
    import gc

    from ep_host.collector import paused_gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with paused_gc():
            [[i] for i in range(100)]
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()

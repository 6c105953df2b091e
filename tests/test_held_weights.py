"""A model file's big float weights are kept out of protobuf: held once, in one aligned buffer
read from the file, each initializer's array a view of it (BERT-base: peak RSS of creating a
session and one run 1172 -> 547 MB, onnxruntime's 575)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession
from ep_host.held_weights import HOLD_MIN_BYTES, SPLIT_MIN_FILE_BYTES
from ep_host.loading import load_model

RNG = np.random.default_rng(0)


def big_model(path, *, odd_names=False):
    """Three MatMuls by 1200 x 1200 weights (5.8 MB each: the file passes the split size), a
    bias (held too: past HOLD_MIN_BYTES), a float scale and a shape initializer that stay in
    protobuf, and a float64 weight."""
    n = 1200
    weights = {f"w{i}{'é' * i if odd_names else ''}": RNG.standard_normal((n, n)).astype(
        np.float32) for i in range(3)}
    bias = RNG.standard_normal(n).astype(np.float32)
    wide = RNG.standard_normal((n, 40)).astype(np.float64)
    names = list(weights)
    nodes = [helper.make_node("MatMul", ["x", names[0]], ["h0"]),
             helper.make_node("MatMul", ["h0", names[1]], ["h1"]),
             helper.make_node("Add", ["h1", "bias"], ["h2"]),
             helper.make_node("MatMul", ["h2", names[2]], ["h3"]),
             helper.make_node("Mul", ["h3", "scale"], ["h3s"]),
             helper.make_node("Reshape", ["h3s", "shape"], ["y"]),
             helper.make_node("Cast", ["h3"], ["h3d"], to=TensorProto.DOUBLE),
             helper.make_node("MatMul", ["h3d", "wide"], ["z"])]
    inits = [numpy_helper.from_array(w, name) for name, w in weights.items()]
    scale = np.array([0.5], np.float32)
    inits += [numpy_helper.from_array(bias, "bias"), numpy_helper.from_array(scale, "scale"),
              numpy_helper.from_array(np.array([2, n // 2], np.int64), "shape"),
              numpy_helper.from_array(wide, "wide")]
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n // 2]),
         helper.make_tensor_value_info("z", TensorProto.DOUBLE, [1, 40])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    assert path.stat().st_size >= SPLIT_MIN_FILE_BYTES
    return model, {**weights, "bias": bias, "scale": scale, "wide": wide}


def test_big_weights_are_views_of_one_aligned_buffer_and_read_exactly(tmp_path):
    path = tmp_path / "big.onnx"
    _, arrays = big_model(path)
    model = load_model(str(path))
    assert model.held is not None
    big = {name for name, a in arrays.items() if a.nbytes >= HOLD_MIN_BYTES}
    assert set(model.held.spans) == big == {"w0", "w1", "w2", "bias", "wide"}
    assert model.proto.ByteSize() < 64 * 1024  # protobuf holds the small tensors only
    for name, want in arrays.items():
        got = model.graph.values[name].value
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert not got.flags.writeable
        if name in big:
            assert np.shares_memory(got, model.held.buffer)
            assert got.ctypes.data % 8 == 0


def test_a_session_on_held_weights_computes_what_onnxruntime_does(tmp_path):
    path = tmp_path / "big.onnx"
    big_model(path, odd_names=True)
    x = RNG.standard_normal((1, 1200)).astype(np.float32)
    got = InferenceSession(str(path), providers=["cpu"]).run(None, {"x": x})
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3 * float(np.abs(w).max()))
    from_bytes = InferenceSession(path.read_bytes(), providers=["cpu"])  # parsed whole
    for g, w in zip(got, from_bytes.run(None, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, w)


def test_a_small_file_is_parsed_as_it_is(tmp_path):
    path = tmp_path / "small.onnx"
    w = RNG.standard_normal((200, 200)).astype(np.float32)  # 160 KB: over the tensor size
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 200])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 200])],
        initializer=[numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph), str(path))
    model = load_model(str(path))
    assert model.held is None
    np.testing.assert_array_equal(model.graph.values["w"].value, w)


def test_models_sharing_weights_of_one_file_hold_one_buffer(tmp_path):
    path = tmp_path / "big.onnx"
    _, arrays = big_model(path)
    first = load_model(str(path), share_weights=True)
    second = load_model(str(path), share_weights=True)
    assert second.held is first.held  # the file's weights are in memory once
    alone = load_model(str(path))  # without sharing: a buffer of its own
    assert alone.held is not first.held
    assert not np.shares_memory(alone.held.buffer, first.held.buffer)
    for name, want in arrays.items():
        np.testing.assert_array_equal(second.graph.values[name].value, want)
        if name in first.held.spans:
            assert np.shares_memory(second.graph.values[name].value, first.held.buffer)


def test_a_rewritten_file_is_not_read_from_the_old_buffer(tmp_path):
    path = tmp_path / "big.onnx"
    big_model(path)
    first = load_model(str(path), share_weights=True)
    before = path.stat().st_mtime_ns
    _, arrays = big_model(path)  # new weights, same layout, same size
    if path.stat().st_mtime_ns == before:  # a coarse clock: the rewrite is a second later
        os.utime(path, ns=(before + 10**9, before + 10**9))
    second = load_model(str(path), share_weights=True)
    assert second.held is not first.held
    for name, want in arrays.items():
        np.testing.assert_array_equal(second.graph.values[name].value, want)


def test_the_shared_buffer_goes_with_the_last_model(tmp_path):
    import gc
    import weakref

    path = tmp_path / "big.onnx"
    big_model(path)
    first = load_model(str(path), share_weights=True)
    buffer = weakref.ref(first.held)
    del first
    gc.collect()
    assert buffer() is None
    third = load_model(str(path), share_weights=True)  # read afresh
    np.testing.assert_array_equal(third.graph.values["w0"].value.shape, (1200, 1200))


def test_two_sessions_sharing_prepacked_use_one_copy_of_the_weights(tmp_path):
    path = tmp_path / "big.onnx"
    big_model(path)
    x = RNG.standard_normal((1, 1200)).astype(np.float32)
    first = InferenceSession(str(path), providers=["cpu"], share_prepacked=True)
    second = InferenceSession(str(path), providers=["cpu"], share_prepacked=True)
    assert second._model.held is first._model.held
    for a, b in zip(first.run(None, {"x": x}), second.run(None, {"x": x}), strict=True):
        np.testing.assert_array_equal(a, b)


def test_weights_in_a_populated_mapping_are_read_exactly(tmp_path, monkeypatch):
    from ep_host import held_weights

    monkeypatch.setattr(held_weights, "POPULATE_MIN_BYTES", 0)  # the big models' buffer
    path = tmp_path / "big.onnx"
    _, arrays = big_model(path)
    model = load_model(str(path))
    assert model.held is not None
    if hasattr(held_weights.mmap, "MAP_ANONYMOUS"):
        assert isinstance(model.held.buffer.base.obj, held_weights.mmap.mmap)
    for name, want in arrays.items():
        got = model.graph.values[name].value
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable


@pytest.mark.parametrize("threaded", [True, False])
def test_weights_from_the_thread_size_on_are_read_before_loading_goes_on(tmp_path, monkeypatch,
                                                                           threaded):
    import threading

    from ep_host import held_weights

    if not hasattr(os, "preadv"):
        pytest.skip("the platform reads no file at an offset: no reading thread at all")
    # the test's file holds 17.6 MB of weights: under the limit, or over a limit of 1 MB
    monkeypatch.setattr(held_weights, "THREAD_MAX_BYTES", 2**30 if threaded else 2**20)
    readers = []
    read = held_weights._read_fully

    def noting(fd, views, position):
        readers.append(threading.current_thread().name)
        read(fd, views, position)

    monkeypatch.setattr(held_weights, "_read_fully", noting)
    path = tmp_path / "big.onnx"
    _, arrays = big_model(path)
    model = load_model(str(path))
    for name, want in arrays.items():
        np.testing.assert_array_equal(model.graph.values[name].value, want)
    assert readers and set(readers) == {"ep-host weights" if threaded else "MainThread"}


def test_weights_read_in_pieces_gaps_and_many_calls_are_read_exactly(tmp_path, monkeypatch):
    from ep_host import held_weights

    # every tensor over several reads, every gap of the file between two raw data a read of
    # its own, calls of two buffers at most
    monkeypatch.setattr(held_weights, "READ_CHUNK_BYTES", 1 << 20)
    monkeypatch.setattr(held_weights, "READ_GAP_BYTES", 0)
    monkeypatch.setattr(held_weights, "READ_MAX_PARTS", 2)
    path = tmp_path / "big.onnx"
    _, arrays = big_model(path)
    model = load_model(str(path))
    for name, want in arrays.items():
        np.testing.assert_array_equal(model.graph.values[name].value, want)
    monkeypatch.setattr(held_weights, "READ_GAP_BYTES", 1 << 20)  # gaps read with the data
    monkeypatch.setattr(held_weights, "READ_MAX_PARTS", 512)
    model = load_model(str(path))
    for name, want in reversed(arrays.items()):  # the last tensor first
        np.testing.assert_array_equal(model.graph.values[name].value, want)


def test_a_file_that_ends_while_its_weights_are_read_names_the_initializer(tmp_path,
                                                                         monkeypatch):
    from ep_host import held_weights
    from ep_host.errors import ModelLoadError

    path = tmp_path / "big.onnx"
    big_model(path)
    monkeypatch.setattr(held_weights.os, "preadv", lambda fd, views, position: 0)
    model = load_model(str(path))  # the small part parses; the weights come later
    with pytest.raises(ModelLoadError, match=r"cannot read initializer 'w0'.*the file ended "
                                             r"inside the weights"):
        _ = model.graph.values["w0"].value


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_while_the_weights_are_read_reads_them_itself(tmp_path, monkeypatch):
    import threading
    import time

    from ep_host import held_weights

    path = tmp_path / "big.onnx"
    _, arrays = big_model(path)
    started = threading.Event()
    preadv = os.preadv

    def slow(fd, views, position):  # the thread's first read waits until the fork is done
        if threading.current_thread().name == "ep-host weights" and not started.is_set():
            started.set()
            time.sleep(0.5)
        return preadv(fd, views, position)

    monkeypatch.setattr(held_weights.os, "preadv", slow)
    model = load_model(str(path))
    assert started.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: no reading thread here
        ok = all(np.array_equal(model.graph.values[n].value, a) for n, a in arrays.items())
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    for name, want in arrays.items():
        np.testing.assert_array_equal(model.graph.values[name].value, want)


def test_shape_inference_reads_the_split_model_itself_without_a_copy(tmp_path, monkeypatch):
    """Every float initializer of HOLD_MIN_BYTES or more is held, and loading keeps in protobuf
    only what inference reads whole: it runs on the parsed model, not a copy without weights."""
    path = tmp_path / "big.onnx"
    model, _ = big_model(path)
    del model.graph.output[:]  # outputs untyped: loading has to infer them
    model.graph.output.extend([helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("z", TensorProto.DOUBLE, None)])
    onnx.save(model, str(path))
    inferred = []
    infer = onnx.shape_inference.infer_shapes

    def recording(proto, *args, **kwargs):
        inferred.append(proto)
        return infer(proto, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", recording)
    loaded = load_model(str(path))
    assert loaded.held is not None and inferred and inferred[0] is loaded.proto
    assert loaded.graph.values["y"].shape == (2, 600)

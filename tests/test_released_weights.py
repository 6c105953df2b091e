"""Weights freed once their kernels packed them (``Kernel.released``, ``ep_host.released``): the
pages go back to the system, the kernel gets a stand-in, the model reads the data from the file
again when asked; nothing is freed that anything else could still read."""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np
import onnx
import pytest
from hostkit import InlineProvider
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession, Kernel, KernelError, hookimpl
from ep_host.held_weights import SPLIT_MIN_FILE_BYTES

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="weights are given back through Linux's madvise")
N = 700  # a 700 x 700 float32 weight: 1.96 MB, held outside protobuf


class PacksAndReleases(Kernel):
    """y = x @ W from a copy of W made in ``prepare``; releases W when ``release``."""

    def __init__(self, release, seen, fail=False):
        self.release, self.seen, self.fail = release, seen, fail
        self.packed = None

    def prepare(self, constants):
        self.packed = np.array(constants[1], copy=True)

    def released(self):
        if self.fail:
            raise RuntimeError("no idea")
        return (1, 1) if self.release else ()  # an index said twice counts once

    def run(self, x, w):
        self.seen.append(w)
        return (x @ self.packed,)


class Packer(InlineProvider):
    def __init__(self, release=True, fail=False):
        super().__init__("packer", ops=("MatMul", "Add", "Identity"))
        self.release, self.fail, self.seen = release, fail, []

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        if node.op_type == "MatMul":  # a node named plain* releases nothing
            release = self.release and not node.name.startswith("plain")
            return PacksAndReleases(release, self.seen, self.fail)
        if node.op_type == "Identity":
            return _Plain(lambda a: a.copy())
        return _Plain(np.add)


class _Plain(Kernel):
    def __init__(self, fn):
        self.fn = fn

    def run(self, *inputs):
        return (self.fn(*inputs),)


def weights(count=2, seed=0):
    rng = np.random.default_rng(seed)
    return {f"w{i}": rng.standard_normal((N, N)).astype(np.float32) for i in range(count)}


def save(tmp_path, nodes, ws, outputs=("y",), name="m.onnx"):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, N])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(w, n) for n, w in ws.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(model, str(path))
    assert path.stat().st_size >= SPLIT_MIN_FILE_BYTES
    return path


def chain(ws):
    return [helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"),
            helper.make_node("MatMul", ["h", "w1"], ["y"], name="mm1")]


def resident_pages(array):
    """How many of the whole pages under ``array`` are in memory (``mincore``)."""
    page = mmap.PAGESIZE
    start = array.ctypes.data
    first, end = -(-start // page) * page, (start + array.nbytes) // page * page
    count = (end - first) // page
    vec = (ctypes.c_ubyte * count)()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(end - first), vec) == 0
    return sum(v & 1 for v in vec), count


def held_view(session, name):
    """The array the model read for ``name`` when the session was made: a view of the held
    buffer (read again through ``value`` once released)."""
    model = session._model
    offset, length = model.held.spans[name]
    return np.frombuffer(model.held.buffer, np.float32, N * N, offset).reshape(N, N)


def test_weights_read_only_by_releasing_kernels_are_given_back(tmp_path, host):
    ws = weights()
    packer = Packer()
    host.register(packer, "packer")
    s = InferenceSession(str(save(tmp_path, chain(ws), ws)), providers=["packer"], host=host)
    freed = dict(s.released_weights)
    assert set(freed) == {"w0", "w1"}
    assert all(N * N * 4 - 2 * mmap.PAGESIZE <= n <= N * N * 4 for n in freed.values())
    for name in freed:
        resident, count = resident_pages(held_view(s, name))
        assert count > 400 and resident == 0
    x = np.random.default_rng(1).standard_normal((2, N)).astype(np.float32)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], x @ ws["w0"] @ ws["w1"], rtol=1e-4,
                               atol=1e-3)
    # each kernel got a stand-in of W's dtype and shape, not its data
    assert all(w.shape == (N, N) and w.dtype == np.float32 and np.isnan(w).all()
               for w in packer.seen)
    # the model reads a released weight from the file again
    np.testing.assert_array_equal(s._model.graph.values["w0"].value, ws["w0"])
    assert resident_pages(held_view(s, "w0"))[0] > 0


def test_nothing_is_freed_that_something_else_reads(tmp_path, host):
    ws = weights(4)
    host.register(Packer(), "packer")
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="mm0"),
             helper.make_node("MatMul", ["h0", "w1"], ["h1"], name="mm1"),
             helper.make_node("MatMul", ["h1", "w1"], ["h2"], name="plain_reader"),
             helper.make_node("MatMul", ["h2", "w2"], ["y"], name="mm2")]
    # w1: also read by a kernel that did not release it; w2 and w3: graph outputs
    path = save(tmp_path, nodes, ws, outputs=("y", "w2", "w3"))
    s = InferenceSession(str(path), providers=["packer"], host=host)
    assert [name for name, _ in s.released_weights] == ["w0"]
    x = np.random.default_rng(1).standard_normal((2, N)).astype(np.float32)
    y, w2, w3 = s.run(None, {"x": x})
    want = x @ ws["w0"] @ ws["w1"] @ ws["w1"] @ ws["w2"]
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-2 * np.abs(want).max())
    np.testing.assert_array_equal(w2, ws["w2"])
    np.testing.assert_array_equal(w3, ws["w3"])


def test_a_model_not_loaded_by_the_session_or_shared_keeps_its_weights(tmp_path, host):
    from ep_host.loading import load_model

    ws = weights()
    host.register(Packer(), "packer")
    path = save(tmp_path, chain(ws), ws)
    given = load_model(str(path))  # the caller holds the model: it may read it
    assert InferenceSession(given, providers=["packer"], host=host).released_weights == []
    np.testing.assert_array_equal(given.graph.values["w1"].value, ws["w1"])
    shared = InferenceSession(str(path), providers=["packer"], host=host, share_prepacked=True)
    assert shared.released_weights == []
    assert InferenceSession(path.read_bytes(), providers=["packer"],
                            host=host).released_weights == []


def test_a_weight_a_rewrite_made_a_view_of_stays(tmp_path, host):
    """``Reshape(w1)`` folds into a view of w1's data under another name, which a kernel
    reads: w1's memory is not given back though its own readers released it."""
    ws = weights()
    host.register(Packer(), "packer")
    nodes = [*chain(ws), helper.make_node("Reshape", ["w1", "shape"], ["w1_view"]),
             helper.make_node("MatMul", ["y", "w1_view"], ["z"], name="plain_reader")]
    path = save(tmp_path, nodes, {**ws, "shape": np.array([1, N, N], np.int64)},
                outputs=("z",))
    s = InferenceSession(str(path), providers=["packer"], host=host)
    view = s._model.graph.values["w1_view"]
    assert view.is_constant and np.shares_memory(view.value, held_view(s, "w1"))
    x = np.random.default_rng(1).standard_normal((2, N)).astype(np.float32)
    want = (x @ ws["w0"] @ ws["w1"] @ ws["w1"])[None]
    np.testing.assert_allclose(s.run(None, {"x": x})[0], want, rtol=1e-3,
                               atol=1e-2 * np.abs(want).max())
    assert [name for name, _ in s.released_weights] == ["w0"]


def test_a_kernel_that_fails_to_say_what_it_released_is_named(tmp_path, host):
    ws = weights()
    host.register(Packer(fail=True), "packer")
    path = save(tmp_path, chain(ws), ws)
    with pytest.raises(KernelError, match=r"provider 'packer' failed to say which inputs the "
                       r"kernel for node 'mm0' released: RuntimeError: no idea"):
        InferenceSession(str(path), providers=["packer"], host=host)


def test_a_released_weight_of_a_changed_file_is_not_read_again(tmp_path, host):
    ws = weights()
    host.register(Packer(), "packer")
    path = save(tmp_path, chain(ws), ws)
    s = InferenceSession(str(path), providers=["packer"], host=host)
    save(tmp_path, chain(ws), weights(seed=5))  # rewritten in place
    from ep_host.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match=r"cannot read initializer 'w0'.*changed since it "
                       r"was loaded"):
        _ = s._model.graph.values["w0"].value


def test_the_guides_releasing_matmul(tmp_path, host):
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parent.parent / "docs" / "ep-author-guide.md").read_text()
    (sample,) = [b for b in re.findall(r"```python\n(.*?)```", guide, re.S)
                 if "class ReleasingMatMul" in b]
    namespace = {}
    exec(sample, namespace)

    class Provider(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            return namespace["ReleasingMatMul"]()

    host.register(Provider("guide", ops=("MatMul",)), "guide")
    ws = weights()
    s = InferenceSession(str(save(tmp_path, chain(ws), ws)), providers=["guide"], host=host)
    assert sorted(name for name, _ in s.released_weights) == ["w0", "w1"]
    x = np.random.default_rng(1).standard_normal((2, N)).astype(np.float32)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], x @ ws["w0"] @ ws["w1"], rtol=1e-4,
                               atol=1e-3)

"""Shared prepacked constants (``share_prepacked=True``): a kernel offers the state it built from
constant inputs (``Kernel.prepacked``); a kernel of equal constants, packing key and device, in
this session or another, adopts it (``Kernel.adopt_prepacked``); the state lives while a session
that uses it lives; a wrong offer is its provider's fault, named."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import Host, InferenceSession, Kernel, KernelError, SessionOptions, hookimpl
from ep_host.prepacked import SHARED_PREPACKED, PrepackedContainer, content_identity


class Packs(Kernel):
    """y = x @ W with W packed (transposed copy) in ``prepare``; records what it adopted."""

    def __init__(self, key="test/transposed-w", offer=None):
        self.key = key
        self.offer = offer
        self.packed = None
        self.adopted = []

    def prepare(self, constants):
        self.packed = np.ascontiguousarray(constants[1].T)  # (N, K)

    def prepacked(self):
        if self.offer is not None:
            return self.offer(self)
        return {self.key: ((1,), self.packed)}

    def adopt_prepacked(self, key, state):
        self.adopted.append((key, state))
        self.packed = state

    def run(self, x, w):
        return (x @ self.packed.T,)


class PackingProvider(InlineProvider):
    def __init__(self, **kernel_args):
        super().__init__("packer", ops=("MatMul",))
        self.kernel_args = kernel_args
        self.kernels = []

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        kernel = Packs(**self.kernel_args)
        self.kernels.append(kernel)
        return kernel


def matmul_model(w, *, names=("w",)):
    """x (2, K) -> MatMul with each initializer in ``names`` (all equal to ``w``) in turn."""
    nodes, prev = [], "x"
    for i, name in enumerate(names):
        nodes.append(helper.make_node("MatMul", [prev, name], [f"y{i}"], name=f"mm{i}"))
        prev = f"y{i}"
    k, n = w.shape
    return make_model(nodes, [("x", TensorProto.FLOAT, [2, k])],
                      [(prev, TensorProto.FLOAT, None)],
                      initializers=[numpy_helper.from_array(w, name) for name in names])


def session(host, model, **kwargs):
    return InferenceSession(model.SerializeToString(), providers=["packer"], host=host,
                            **kwargs)


@pytest.fixture
def weights():
    return np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)


@pytest.fixture
def packer(host):
    provider = PackingProvider()
    host.register(provider, "packer")
    return provider


def test_a_second_session_adopts_the_first_ones_state(host, packer, weights):
    model = matmul_model(weights)
    first = session(host, model, share_prepacked=True)
    second = session(host, model, share_prepacked=True)
    k1, k2 = packer.kernels
    assert k1.adopted == [] and len(k2.adopted) == 1
    assert k2.packed is k1.packed
    assert [(u.node, u.key, u.adopted) for u in second.prepacked] == [
        ("mm0", "test/transposed-w", True)]
    assert [u.adopted for u in first.prepacked] == [False]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(second.run(None, {"x": x})[0], x @ weights)


def test_without_sharing_nothing_is_offered_or_adopted(host, packer, weights):
    model = matmul_model(weights)
    first, second = session(host, model), session(host, model)
    assert [k.adopted for k in packer.kernels] == [[], []]
    assert packer.kernels[0].packed is not packer.kernels[1].packed
    assert first.prepacked == second.prepacked == []


def test_session_options_turn_sharing_on(host, packer, weights):
    options = SessionOptions()
    options.share_prepacked = True
    model = matmul_model(weights)
    first = session(host, model, sess_options=options)  # held: its state lives while it does
    shared = session(host, model, sess_options=options)
    assert first.get_session_options().share_prepacked is True
    assert shared.get_session_options().share_prepacked is True
    assert len(packer.kernels[1].adopted) == 1


def test_two_sessions_of_one_file_share_by_content(host, packer, weights, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(matmul_model(weights).SerializeToString())
    first = InferenceSession(str(path), providers=["packer"], host=host, share_prepacked=True)
    InferenceSession(str(path), providers=["packer"], host=host, share_prepacked=True)
    assert len(packer.kernels[1].adopted) == 1
    assert first.prepacked[0].adopted is False


def test_kernels_of_one_session_share_an_initializer_of_equal_contents(host, packer, weights):
    shared = session(host, matmul_model(weights, names=("w", "w_copy")), share_prepacked=True)
    assert [u.adopted for u in shared.prepacked] == [False, True]
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(shared.run(None, {"x": x})[0], x @ weights @ weights, rtol=1e-6)


def test_different_contents_are_not_shared(host, packer, weights):
    first = session(host, matmul_model(weights), share_prepacked=True)
    other = weights.copy()
    other[3, 3] = np.nextafter(other[3, 3], np.float32(np.inf))  # one bit apart
    second = session(host, matmul_model(other), share_prepacked=True)
    assert packer.kernels[1].adopted == []
    x = np.eye(2, 4, dtype=np.float32)
    np.testing.assert_array_equal(second.run(None, {"x": x})[0], x @ other)
    assert first.prepacked[0].held is not second.prepacked[0].held


def test_a_different_packing_key_is_not_shared(host, weights):
    one, two = PackingProvider(key="layout-a"), PackingProvider(key="layout-b")
    host.register(one, "packer")
    first = session(host, matmul_model(weights), share_prepacked=True)
    other_host = Host(strict=False)
    other_host.register(two, "packer")
    session(other_host, matmul_model(weights), share_prepacked=True)
    assert two.kernels[0].adopted == [] and first.prepacked[0].key == "layout-a"
    same = PackingProvider(key="layout-a")
    third_host = Host(strict=False)
    third_host.register(same, "packer")
    session(third_host, matmul_model(weights), share_prepacked=True)
    assert len(same.kernels[0].adopted) == 1  # the same key from another host: shared


def test_the_state_dies_with_the_last_session_that_uses_it(host, packer, weights):
    model = matmul_model(weights)
    identity = content_identity(weights)
    key = ("cpu", "test/transposed-w", (1,), (identity,))
    first = session(host, model, share_prepacked=True)
    second = session(host, model, share_prepacked=True)
    assert SHARED_PREPACKED.share(key, None)[1] is True
    del first
    gc.collect()
    assert SHARED_PREPACKED.share(key, None)[1] is True  # the second session still holds it
    del second
    packer.kernels.clear()
    gc.collect()
    held, adopted = SHARED_PREPACKED.share(key, "fresh")
    assert adopted is False and held.state == "fresh"


def test_an_offer_of_a_non_constant_input_is_the_providers_fault(host, weights):
    host.register(PackingProvider(offer=lambda k: {"bad": ((0,), k.packed)}), "packer")
    with pytest.raises(KernelError, match=r"'packer' offered prepacked state 'bad' of node "
                                          r"'mm0' built from inputs \[0\]"):
        session(host, matmul_model(weights), share_prepacked=True)


def test_a_kernel_that_fails_to_offer_names_provider_and_node(host, weights):
    def fails(kernel):
        raise RuntimeError("no state")

    host.register(PackingProvider(offer=fails), "packer")
    with pytest.raises(KernelError, match=r"provider 'packer' failed to share the prepacked "
                                          r"state of node 'mm0': RuntimeError: no state"):
        session(host, matmul_model(weights), share_prepacked=True)


def test_content_identity_tells_dtype_shape_and_bytes_apart():
    a = np.arange(6, dtype=np.float32)
    assert content_identity(a) == content_identity(a.copy())
    assert content_identity(a) != content_identity(a.reshape(2, 3))
    assert content_identity(a) != content_identity(a.view(np.int32))
    assert content_identity(np.array([0.0])) != content_identity(np.array([-0.0]))


def test_a_container_gives_the_first_state_offered_under_a_key():
    container = PrepackedContainer()
    first, adopted = container.share("k", [1])
    assert adopted is False
    again, adopted = container.share("k", [2])
    assert adopted is True and again is first and again.state == [1]
    assert len(container) == 1


def test_sessions_hold_one_copy_of_each_constant_of_equal_contents(host, packer):
    big = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)  # 4 KiB
    model = matmul_model(big)
    first = session(host, model, share_prepacked=True)
    second = session(host, model, share_prepacked=True)
    alone = session(host, model)
    def weight(of):
        return of.model.graph.nodes[0].inputs[1].value

    mine = weight(first)
    assert np.shares_memory(weight(second), mine)
    assert not np.shares_memory(weight(alone), mine)
    assert not weight(second).flags.writeable
    x = np.ones((2, 32), np.float32)
    np.testing.assert_array_equal(second.run(None, {"x": x})[0], alone.run(None, {"x": x})[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.uint16,
                                   np.int64, np.bool_])
def test_a_constants_identity_from_its_raw_bytes_is_its_arrays(dtype):
    from ep_host.tensors import raw_identity

    array = (np.random.default_rng(2).standard_normal((3, 5)) * 9).astype(dtype)
    tensor = numpy_helper.from_array(array, "t")
    assert tensor.HasField("raw_data")
    assert raw_identity(tensor) == content_identity(array)


def test_typed_data_has_no_raw_identity():
    from ep_host.tensors import raw_identity

    assert raw_identity(helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0])) is None


def test_a_shared_constant_is_never_read_into_an_array_by_the_second_session(host, packer):
    big = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)
    model = matmul_model(big)
    first = session(host, model, share_prepacked=True)
    second = session(host, model, share_prepacked=True)
    assert len(first.model._constants) == 1  # read once, by the first
    held = list(second.model._constants.values())
    assert len(held) == 1 and np.shares_memory(held[0], first.model._constants.popitem()[1])

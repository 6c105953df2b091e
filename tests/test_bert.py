"""Transformers: the examples' encoder block and a BERT-base-sized encoder against onnxruntime."""

import os

import numpy as np
import onnx
import pytest

from ep_host import InferenceSession
from ep_host.testing.models import bert_encoder, bert_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _onnxruntime(model_bytes, feeds):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model_bytes, options,
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.fixture(scope="module")
def bert_base():
    model = bert_encoder(layers=12, hidden=768, heads=12, seq=128)
    return model.SerializeToString(), bert_inputs(model)


def test_bert_base_encoder_matches_onnxruntime(bert_base):
    data, feeds = bert_base
    session = InferenceSession(data, providers=["cpu"])
    assert {n.provider for n in session.placement.nodes} == {"cpu"}
    (ours,) = session.run(None, feeds)
    (theirs,) = _onnxruntime(data, feeds)
    assert ours.shape == (1, 128, 768)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_the_examples_transformer_block_matches_onnxruntime():
    path = os.path.join(ROOT, "examples", "transformer_block.onnx")
    model = onnx.load(path)
    session = InferenceSession(path, providers=["cpu"])
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 8), (3, 5)):  # symbolic dims, bound differently per run
        feeds = {}
        for arg in session.get_inputs():
            shape = [batch if d == "batch" else seq if d == "seq" else d for d in arg.shape]
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
        ours = session.run(None, feeds)
        theirs = _onnxruntime(model.SerializeToString(), feeds)
        for a, b in zip(ours, theirs, strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_gpt2_like_decoder_matches_onnxruntime():
    from ep_host.testing.models import gpt2_decoder, gpt2_inputs

    model = gpt2_decoder()
    data, feeds = model.SerializeToString(), gpt2_inputs(model)
    (ours,) = InferenceSession(data, providers=["cpu"]).run(None, feeds)
    (theirs,) = _onnxruntime(data, feeds)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)

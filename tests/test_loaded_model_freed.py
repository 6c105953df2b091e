"""A session that loads a model and optimizes it into another frees the model as loaded at once
(its views refer to each other, so it would otherwise stay, weights and all, until Python's next
full cyclic collection); a model the caller loaded stays whole."""

from __future__ import annotations

import gc
import weakref

import pytest
from hostkit import conv_relu_model

from ep_host import InferenceSession, loading, session


@pytest.fixture
def loads(monkeypatch):
    """Weak references to each model the session loads."""
    seen = []
    real = session.load_model

    def load_model(*args, **kwargs):
        model = real(*args, **kwargs)
        seen.append(weakref.ref(model))
        return model

    monkeypatch.setattr(session, "load_model", load_model)
    return seen


def test_a_replaced_model_is_freed_at_once(loads):
    gc.disable()
    try:
        created = InferenceSession(conv_relu_model(), providers=["cpu"])
        assert created.model.optimizations  # the session runs the optimized model
        (loaded,) = loads
        assert loaded() is None
    finally:
        gc.enable()


def test_a_model_the_caller_loaded_keeps_its_views():
    model = loading.load_model(conv_relu_model())
    created = InferenceSession(model, providers=["cpu"])
    assert created.model is not model and created.model.optimizations
    assert [n.op_type for n in model.graph.nodes] == ["Conv", "Relu"]
    assert model.graph.nodes[0].graph is model.graph and model.graph.model is model

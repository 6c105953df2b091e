"""A tree ensemble's few-row walk compiled by numba against numpy's passes (the same scores and
vote flags, bit for bit, averaged, zeroed where no leaf voted and with base values added, NaN
inputs and every fast branch mode included), and both against onnxruntime; which forests and
batches it is asked for."""

from __future__ import annotations

import numpy as np
import pytest
from ep_host_cpu.tree_walk import CompiledTreeWalk
from ep_host_cpu.xp import numpy_xp
from test_ml_trees import assert_same, classifier, forest_of, inputs, regressor

FAST_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT")


@pytest.fixture
def walk_off(monkeypatch):
    """numpy's passes for every batch."""
    monkeypatch.setattr(CompiledTreeWalk, "MAX_PAIRS", 0)


def forests(rng):
    yield "regressor, every fast mode, tracks", regressor(rng, 3, targets=3, modes=FAST_MODES,
                                                          tracks=True, trees=20, depth=6)
    yield "regressor, average", regressor(rng, 1, targets=2, aggregate="AVERAGE", trees=7)
    yield "classifier, multi-vote", classifier(rng, 3, [0, 1, 2], trees=20, depth=5,
                                               tracks=True, modes=FAST_MODES)
    yield "classifier, a class without votes", classifier(rng, 4, [0, 2], trees=5)
    yield "binary one column", classifier(rng, 2, [0], transform="LOGISTIC", trees=9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_walk_scores_as_numpy_bit_for_bit(rng, monkeypatch, dtype):
    walk = numpy_xp.compiled_tree_walk
    assert walk.ready(dtype)
    for label, model in forests(rng):
        forest = forest_of(model)
        for rows in (1, 3, 40):
            x = inputs(rng, rows=rows, nan=True, dtype=dtype)
            x[0, :] = forest.splits[:4].astype(dtype)  # thresholds hit exactly
            base = rng.normal(size=forest.n_targets) if rows != 3 else None
            monkeypatch.setattr(CompiledTreeWalk, "MAX_PAIRS", 10 ** 9)
            assert forest._compiled_walk(numpy_xp, x) is walk, label
            compiled = forest.scores(numpy_xp, x, base)
            monkeypatch.setattr(CompiledTreeWalk, "MAX_PAIRS", 0)
            assert forest._compiled_walk(numpy_xp, x) is None
            passes = forest.scores(numpy_xp, x, base)
            np.testing.assert_array_equal(compiled[0], passes[0], err_msg=f"{label}, {rows}")
            assert (compiled[1] is None) == (passes[1] is None), label
            if passes[1] is not None:
                np.testing.assert_array_equal(compiled[1], passes[1], err_msg=label)


def test_a_forest_walks_again_through_its_bound_walk_as_asked(rng, monkeypatch):
    # after a first compiled walk, later inputs of the type go to the walk bound with the
    # forest's tables, while the batch fits (MAX_PAIRS) and the base is the same
    forest = forest_of(regressor(rng, 3, targets=2, tracks=True, trees=6, depth=4))
    base = rng.normal(size=forest.n_targets)
    x = inputs(rng, rows=5, nan=True)
    first = forest.scores(numpy_xp, x, base)
    assert np.dtype(np.float32) in forest._bound
    calls = []
    bound = forest._bound[np.dtype(np.float32)]
    forest._bound[np.dtype(np.float32)] = (bound[0], lambda v: calls.append(v) or bound[1](v),
                                           bound[2])
    again = forest.scores(numpy_xp, x, base)
    assert len(calls) == 1 and np.array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    with monkeypatch.context() as patched:
        patched.setattr(CompiledTreeWalk, "MAX_PAIRS", 0)  # too many pairs: numpy's passes
        passes = forest.scores(numpy_xp, x, base)
    assert len(calls) == 1
    np.testing.assert_array_equal(first[0], passes[0])
    forest.scores(numpy_xp, np.asfortranarray(x), base)  # not C-contiguous: as before
    assert len(calls) == 1
    forest.scores(numpy_xp, x, base + 0)  # another base: walked as before, then bound anew
    assert len(calls) == 1 and forest._bound[np.dtype(np.float32)][1] is not bound[1]


def test_forests_the_walk_is_not_asked_for(rng):
    walk = numpy_xp.compiled_tree_walk
    x = inputs(rng, rows=1)
    equal = forest_of(regressor(rng, 3, modes=("BRANCH_EQ", "BRANCH_LEQ"), trees=3))
    assert not equal.fast and equal._compiled_walk(numpy_xp, x) is None
    smallest = forest_of(regressor(rng, 3, aggregate="MIN", trees=3))
    assert smallest._compiled_walk(numpy_xp, x) is None
    many = forest_of(regressor(rng, 3, trees=8, depth=2))
    assert many._compiled_walk(numpy_xp, x) is walk
    rows = walk.MAX_PAIRS // 8 + 1
    assert many._compiled_walk(numpy_xp, inputs(rng, rows=rows)) is None
    assert not walk.ready(np.float16) and not walk.ready(np.int64)


@pytest.mark.parametrize("numpy_passes", [False, True])
def test_both_ways_match_onnxruntime(rng, request, numpy_passes):
    if numpy_passes:
        request.getfixturevalue("walk_off")
    for _, model in forests(rng):
        for rows in (1, 5):
            assert_same(model, inputs(rng, rows=rows, nan=True))

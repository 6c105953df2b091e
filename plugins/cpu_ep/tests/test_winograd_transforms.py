"""Winograd F(2x2, 3x3)'s transforms compiled by numba (``xp.winograd_transforms``): the Conv's
values equal numpy's passes' to the bit (odd and even outputs, padding, batches; NaN where
numpy's are, its sign bit aside; infinities), and the compiled transforms are what the variant
runs when numba is wanted."""

from __future__ import annotations

import numpy as np
import pytest
from ep_host_cpu.xp import numpy_xp

from ep_host.kernels import conv as conv_kernels

CASES = [  # (x shape, output channels, pads)
    ((1, 64, 8, 8), 64, (1, 1, 1, 1)),
    ((2, 64, 9, 7), 72, (2, 0, 1, 3)),  # odd outputs, uneven padding, a batch
    ((1, 66, 11, 10), 64, (0, 0, 0, 0)),
    ((1, 40, 15, 13), 48, (1, 1, 1, 1)),
    ((1, 128, 14, 14), 96, (1, 1, 1, 1)),
]


def conv(x, w, b, pads):
    kw = {"auto_pad": "NOTSET", "group": 1, "strides": (1, 1), "dilations": (1, 1),
          "pads": pads}
    kw.update(conv_kernels.prepare_conv(numpy_xp, {1: w, 2: b}, group=1))  # a plan of its own
    y = conv_kernels.conv(numpy_xp, x, w, b, **kw)
    plan = next(iter(kw["packed"].plans.values()))
    assert plan.variant == "winograd"
    return y, plan


@pytest.mark.parametrize(("x_shape", "m", "pads"), CASES)
def test_the_compiled_transforms_equal_numpys_passes_bit_for_bit(rng, monkeypatch, x_shape, m,
                                                                 pads):
    x = (rng.standard_normal(x_shape) * 4).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[0, 1, 2, 2] = -0.0
    w = rng.standard_normal((m, x_shape[1], 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    compiled, plan = conv(x, w, b, pads)
    assert plan.transforms is not None
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    passes, plan = conv(x, w, b, pads)
    assert plan.transforms is None
    assert compiled.flags.c_contiguous and compiled.shape == passes.shape
    nan = np.isnan(passes)
    np.testing.assert_array_equal(np.isnan(compiled), nan)  # a NaN's sign bit may differ
    np.testing.assert_array_equal(compiled[~nan].view(np.int32), passes[~nan].view(np.int32))

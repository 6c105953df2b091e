"""Reshape, Flatten, Squeeze, Unsqueeze and Transpose hand back views of their input: no copy."""

import numpy as np
from ep_host_cpu.xp import numpy_xp as xp

from ep_host.kernels import shape as shape_kernels

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_movement_kernels_return_views_of_their_input():
    outs = {
        "reshape": shape_kernels.reshape(xp, X, np.array([6, 4]), allowzero=0),
        "flatten": shape_kernels.flatten(xp, X, axis=1),
        "squeeze": shape_kernels.squeeze(xp, X.reshape(2, 1, 12), np.array([1])),
        "unsqueeze": shape_kernels.unsqueeze(xp, X, np.array([0])),
        "transpose": shape_kernels.transpose(xp, X, perm=[2, 0, 1]),
    }
    for name, out in outs.items():
        assert np.shares_memory(out, X), name
    np.testing.assert_array_equal(outs["transpose"], X.transpose(2, 0, 1))
    np.testing.assert_array_equal(outs["reshape"], X.reshape(6, 4))

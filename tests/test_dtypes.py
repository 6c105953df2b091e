import numpy as np
import pytest

from ep_host import dtype


def test_codes_names_and_numpy_agree():
    assert dtype(1).name == "float32" and dtype(1).numpy == np.float32
    assert dtype("int64").code == 7
    assert dtype(np.dtype("float16")).name == "float16"
    assert dtype("double") is dtype("float64")


def test_types_numpy_lacks_come_from_ml_dtypes():
    assert dtype("bfloat16").numpy is not None
    assert dtype("bfloat16").numpy.itemsize == 2
    assert dtype("int4").bits == 4


def test_unknown_codes_are_rejected():
    with pytest.raises(ValueError, match="99"):
        dtype(99)

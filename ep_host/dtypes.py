"""ONNX tensor element types: names, storage sizes and their numpy dtypes.

The codes are the ``TensorProto.DataType`` values of the ONNX specification; this module does not
import onnx. Types numpy lacks (bfloat16, float8, 4-bit) map to ``ml_dtypes`` when it is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np


@dataclass(frozen=True, slots=True)
class DType:
    """One ONNX element type: ``code`` (TensorProto enum), ``name`` and storage ``bits``."""

    code: int
    name: str
    bits: int
    numpy_name: str | None

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"DType({self.name})"

    @property
    def is_float(self) -> bool:
        return self.name.startswith(("float", "bfloat"))

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy dtype that stores this type, or ``None`` where there is none."""
        return _numpy_dtype(self.numpy_name)

    def storage_bytes(self, count: int) -> int:
        """Bytes that ``count`` elements take in memory; sub-byte types pack two to a byte."""
        if self.bits >= 8:
            return count * (self.bits // 8)
        return -(-count * self.bits // 8)


_TABLE = (
    (1, "float32", 32, "float32"),
    (2, "uint8", 8, "uint8"),
    (3, "int8", 8, "int8"),
    (4, "uint16", 16, "uint16"),
    (5, "int16", 16, "int16"),
    (6, "int32", 32, "int32"),
    (7, "int64", 64, "int64"),
    (8, "string", 64, "object"),
    (9, "bool", 8, "bool"),
    (10, "float16", 16, "float16"),
    (11, "float64", 64, "float64"),
    (12, "uint32", 32, "uint32"),
    (13, "uint64", 64, "uint64"),
    (14, "complex64", 64, "complex64"),
    (15, "complex128", 128, "complex128"),
    (16, "bfloat16", 16, "ml_dtypes.bfloat16"),
    (17, "float8e4m3fn", 8, "ml_dtypes.float8_e4m3fn"),
    (18, "float8e4m3fnuz", 8, "ml_dtypes.float8_e4m3fnuz"),
    (19, "float8e5m2", 8, "ml_dtypes.float8_e5m2"),
    (20, "float8e5m2fnuz", 8, "ml_dtypes.float8_e5m2fnuz"),
    (21, "uint4", 4, "ml_dtypes.uint4"),
    (22, "int4", 4, "ml_dtypes.int4"),
    (23, "float4e2m1", 4, "ml_dtypes.float4_e2m1fn"),
    (24, "float8e8m0", 8, "ml_dtypes.float8_e8m0fnu"),
    (25, "uint2", 2, "ml_dtypes.uint2"),
    (26, "int2", 2, "ml_dtypes.int2"),
)

_BY_CODE = {code: DType(code, name, bits, np_name) for code, name, bits, np_name in _TABLE}
_BY_NAME = {dt.name: dt for dt in _BY_CODE.values()}
_BY_NAME.update({"float": _BY_NAME["float32"], "double": _BY_NAME["float64"],
                 "half": _BY_NAME["float16"]})

FLOAT32 = _BY_NAME["float32"]
FLOAT16 = _BY_NAME["float16"]
FLOAT64 = _BY_NAME["float64"]
INT64 = _BY_NAME["int64"]
INT32 = _BY_NAME["int32"]
BOOL = _BY_NAME["bool"]


@cache
def _numpy_dtype(numpy_name: str | None) -> np.dtype | None:
    if numpy_name is None:
        return None
    if numpy_name.startswith("ml_dtypes."):
        try:
            import ml_dtypes
        except ImportError:
            return None
        kind = getattr(ml_dtypes, numpy_name.split(".", 1)[1], None)
        return None if kind is None else np.dtype(kind)
    return np.dtype(numpy_name)


def dtype(key: int | str | np.dtype | DType) -> DType:
    """The :class:`DType` for a TensorProto code, a name ("float32", "int4"), or a numpy dtype."""
    if isinstance(key, DType):
        return key
    if isinstance(key, int | np.integer):
        try:
            return _BY_CODE[int(key)]
        except KeyError:
            raise ValueError(f"unknown ONNX element type code {key}") from None
    if isinstance(key, str) and key in _BY_NAME:
        return _BY_NAME[key]
    return from_numpy(np.dtype(key))


@cache
def from_numpy(np_dtype: np.dtype) -> DType:
    """The :class:`DType` that stores as ``np_dtype``; ``ValueError`` when ONNX has none."""
    np_dtype = np.dtype(np_dtype)
    if np_dtype.kind in "OUS":
        return _BY_NAME["string"]
    for dt in _BY_CODE.values():
        if dt.name != "string" and dt.numpy == np_dtype:
            return dt
    raise ValueError(f"numpy dtype {np_dtype} has no ONNX element type")


def all_dtypes() -> tuple[DType, ...]:
    return tuple(_BY_CODE.values())

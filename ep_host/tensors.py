"""Reading a ``TensorProto``'s data as a read-only numpy array, and the checks that refuse a
tensor whose data does not fit its declared shape (negative dims, int64 overflow, a wrong
raw-data length or value count). External data is read through ``ep_host.external_data``.
"""

from __future__ import annotations

import hashlib
import math
import sys
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto

from ep_host.dtypes import dtype as to_dtype
from ep_host.errors import ModelLoadError, ModelValidationError
from ep_host.external_data import read_external_tensor

if TYPE_CHECKING:
    from ep_host.loading import Model

_INT64_MAX = 2**63 - 1


def readonly(array: np.ndarray) -> np.ndarray:
    """``array``, marked read-only (constants are shared by every kernel that reads them)."""
    array.flags.writeable = False
    return array


def tensor_to_array(t: TensorProto, model: Model | None) -> np.ndarray:
    """The data of ``t`` as a numpy array; external data is read from ``model``'s folder.
    Raises :class:`ModelLoadError` or :class:`ModelValidationError` naming the tensor."""
    label = model.label if model is not None else "<model>"
    if t.data_location == TensorProto.EXTERNAL:
        if model is None:
            raise ModelLoadError(f"tensor {t.name!r} has external data but no model folder")
        return read_external_tensor(t, model.base_dir, model.label)
    count = checked_element_count(t, label)
    raw = t.HasField("raw_data")
    plain = _PLAIN_RAW.get(t.data_type) if raw and sys.byteorder == "little" else None
    if plain is not None:  # the common case without onnx's general reader (a few us a tensor)
        payload = t.raw_data  # one copy out of the message
        if len(payload) != count * plain.itemsize:
            _check_raw_length(t, count, label)
        return np.frombuffer(payload, dtype=plain).reshape(tuple(t.dims))  # read-only
    try:
        dt = to_dtype(t.data_type)
        fixed = dt.bits % 8 == 0 and dt.name != "string"
    except Exception:
        fixed = False
    if raw and not fixed:  # unknown, packed or string: to_array would not notice a bad length
        _check_raw_length(t, count, label)
    try:
        return onnx.numpy_helper.to_array(t)
    except Exception as exc:
        if raw:  # a fixed-width type fails there exactly when its length is wrong: say so
            _check_raw_length(t, count, label)
        raise ModelLoadError(
            f"{label}: cannot read tensor {t.name!r}: {type(exc).__name__}: {exc}") from exc


# raw data of these types is the values themselves, little-endian (the ONNX format)
_PLAIN_RAW = {TensorProto.FLOAT: np.dtype(np.float32), TensorProto.DOUBLE: np.dtype(np.float64),
              TensorProto.FLOAT16: np.dtype(np.float16), TensorProto.INT8: np.dtype(np.int8),
              TensorProto.INT16: np.dtype(np.int16), TensorProto.INT32: np.dtype(np.int32),
              TensorProto.INT64: np.dtype(np.int64), TensorProto.UINT8: np.dtype(np.uint8),
              TensorProto.UINT16: np.dtype(np.uint16), TensorProto.UINT32: np.dtype(np.uint32),
              TensorProto.UINT64: np.dtype(np.uint64)}


def _check_raw_length(t: TensorProto, count: int, label: str) -> None:
    """Refuse raw data whose length is not what ``count`` elements of the type take (reading
    ``len(t.raw_data)`` copies the payload, so only where it is needed)."""
    try:
        expected = to_dtype(t.data_type).storage_bytes(count)
    except Exception as exc:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} has unknown data type {t.data_type}") from exc
    got = len(t.raw_data)
    if got != expected:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} of shape {list(t.dims)} needs {expected} bytes of "
            f"raw data, it holds {got}")


def checked_element_count(t: TensorProto, label: str) -> int:
    """The element count ``t.dims`` declares, refused when negative or past int64."""
    n = 1
    for d in t.dims:
        if d < 0:
            raise ModelValidationError(
                f"{label}: tensor {t.name!r} has a negative dim in shape {list(t.dims)}")
        n *= d
    if n > _INT64_MAX:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} has shape {list(t.dims)}, whose element count "
            "overflows int64")
    return n


# The typed field holding each data type's values, and how many entries one element takes.
_TYPED_FIELDS = {
    TensorProto.FLOAT: ("float_data", 1), TensorProto.DOUBLE: ("double_data", 1),
    TensorProto.INT64: ("int64_data", 1), TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.UINT32: ("uint64_data", 1), TensorProto.INT32: ("int32_data", 1),
    TensorProto.INT16: ("int32_data", 1), TensorProto.INT8: ("int32_data", 1),
    TensorProto.UINT16: ("int32_data", 1), TensorProto.UINT8: ("int32_data", 1),
    TensorProto.BOOL: ("int32_data", 1), TensorProto.FLOAT16: ("int32_data", 1),
    TensorProto.BFLOAT16: ("int32_data", 1), TensorProto.STRING: ("string_data", 1),
    TensorProto.COMPLEX64: ("float_data", 2), TensorProto.COMPLEX128: ("double_data", 2),
}


def check_initializer(t: TensorProto, label: str) -> None:
    """Dims and, for typed (not raw, not external) data, the value count against the shape;
    raw data is checked when it is read (reading its length copies it)."""
    n = checked_element_count(t, label)
    if t.data_location == TensorProto.EXTERNAL or t.HasField("raw_data"):
        return
    typed = _TYPED_FIELDS.get(t.data_type)
    if typed is None:
        return
    got = len(getattr(t, typed[0]))
    if got != n * typed[1]:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} of shape {list(t.dims)} needs {n * typed[1]} values "
            f"in {typed[0]}, it holds {got}")


MAX_DENSIFIED_BYTES = 1 << 30  # a sparse initializer densifies to at most this many bytes


def sparse_to_dense(sp: onnx.SparseTensorProto, model: Model | None) -> TensorProto:
    """A sparse initializer as the dense tensor it stands for: its values at its indices (linear
    ones, or one row of coordinates per value), zero elsewhere, its dtype and dims kept.
    Raises :class:`ModelValidationError` naming the tensor when it cannot be densified."""
    label = model.label if model is not None else "<model>"
    name = sp.values.name
    where = f"{label}: sparse initializer {name!r}"
    dims = list(sp.dims)
    count = checked_element_count(TensorProto(name=name, dims=dims), label)
    try:
        dt = to_dtype(sp.values.data_type)
    except Exception as exc:
        raise ModelValidationError(
            f"{where} has unknown data type {sp.values.data_type}") from exc
    if dt.numpy is None or dt.name == "string" or dt.bits % 8:
        raise ModelValidationError(
            f"{where} is of type {dt.name}, which ep-host does not densify; store it dense")
    if dt.storage_bytes(count) > MAX_DENSIFIED_BYTES:
        raise ModelValidationError(
            f"{where} of shape {dims} would take {dt.storage_bytes(count)} bytes dense, over "
            f"the limit of {MAX_DENSIFIED_BYTES}; ep-host runs sparse initializers densified")
    values = tensor_to_array(sp.values, model)
    indices = (tensor_to_array(sp.indices, model) if sp.HasField("indices")
               else np.zeros((0,), np.int64))
    if values.ndim != 1:
        raise ModelValidationError(
            f"{where}: its values have shape {list(values.shape)}; they must be 1-D")
    nnz = values.shape[0]
    if indices.dtype.kind not in "iu" or indices.shape[:1] != (nnz,) or indices.ndim > 2 or (
            indices.ndim == 2 and indices.shape[1] != len(dims)):
        raise ModelValidationError(
            f"{where}: its indices have shape {list(indices.shape)} and type {indices.dtype}; "
            f"with {nnz} values they must be int64 of shape [{nnz}] or [{nnz}, {len(dims)}]")
    indices = indices.astype(np.int64, copy=False)
    if indices.ndim == 2:
        bounds = np.asarray(dims, np.int64)
        if nnz and ((indices < 0) | (indices >= bounds)).any():
            raise ModelValidationError(
                f"{where}: an index lies outside its shape {dims}")
        flat = np.ravel_multi_index(tuple(indices.T), dims) if nnz else indices[:, 0]
    else:
        if nnz and (indices.min() < 0 or indices.max() >= count):
            raise ModelValidationError(
                f"{where}: an index lies outside its {count} elements (shape {dims})")
        flat = indices
    if np.unique(flat).size != nnz:
        raise ModelValidationError(f"{where} sets one position twice")
    dense = np.zeros(count, dtype=values.dtype)
    dense[flat] = values
    return onnx.numpy_helper.from_array(dense.reshape(dims), name)


# Types whose raw data is exactly the bytes of the numpy array read from it (little-endian).
_NATIVE_RAW = frozenset({
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BOOL,
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
})


def raw_identity(t: TensorProto) -> tuple[str, tuple[int, ...], str] | None:
    """``ep_host.prepacked.content_identity`` of the array ``t`` holds, worked out from its raw
    bytes without reading them into an array; ``None`` where the raw bytes are not exactly the
    array's (typed or external data, packed or exotic types, a big-endian machine)."""
    if (sys.byteorder != "little" or t.data_location == TensorProto.EXTERNAL
            or t.data_type not in _NATIVE_RAW or not t.HasField("raw_data")):
        return None
    np_dtype = to_dtype(t.data_type).numpy
    shape = tuple(int(d) for d in t.dims)
    raw = t.raw_data
    if np_dtype is None or len(raw) != math.prod(shape) * np_dtype.itemsize:
        return None
    return np_dtype.str, shape, hashlib.sha256(raw).hexdigest()

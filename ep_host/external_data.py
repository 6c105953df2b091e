"""External data: the file a tensor's ``location`` names, refused unless it is a regular file
inside the model's folder, and reading the tensor's bytes from it.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import onnx
from onnx import TensorProto

from ep_host.dtypes import dtype as to_dtype
from ep_host.errors import ModelLoadError


def resolve_external_path(base_dir: str, location: str, label: str, tensor: str) -> str:
    """The file an external-data ``location`` names, refused unless it lies inside ``base_dir``."""
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")):
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data at {location!r}: only paths relative "
            "to the model's folder are allowed"
        )
    base = os.path.realpath(base_dir)
    target = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, target]) != base:
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data at {location!r}, which resolves "
            f"outside the model's folder {base_dir!r}"
        )
    try:
        st = os.stat(target)
    except FileNotFoundError:
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data in {location!r}, which does not exist"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data in {location!r}, not a regular file"
        )
    return target


def read_external_tensor(t: TensorProto, base_dir: str | None, label: str) -> np.ndarray:
    """The data of ``t``, whose bytes lie in an external file under ``base_dir`` (the model's
    folder); ``label`` names the model in errors."""
    info = {e.key: e.value for e in t.external_data}
    if base_dir is None:
        raise ModelLoadError(
            f"{label}: tensor {t.name!r} has external data, but the model was given as "
            "bytes without a base directory (pass base_dir=)"
        )
    path = resolve_external_path(base_dir, info.get("location", ""), label, t.name)
    offset = int(info.get("offset", 0) or 0)
    size = os.path.getsize(path)
    expected = to_dtype(t.data_type).storage_bytes(int(np.prod(t.dims, dtype=np.int64)))
    length = int(info["length"]) if info.get("length") else expected
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelLoadError(
            f"{label}: tensor {t.name!r} reads bytes {offset}..{offset + length} of "
            f"{info.get('location')!r}, which has {size}"
        )
    with open(path, "rb") as f:
        f.seek(offset)
        raw = f.read(length)
    copy = TensorProto()
    copy.CopyFrom(t)
    del copy.external_data[:]
    copy.data_location = TensorProto.DEFAULT
    copy.raw_data = raw
    return onnx.numpy_helper.to_array(copy)


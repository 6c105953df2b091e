"""``onnx.backend.base.Backend`` over ep-host, so onnx's backend test suite can drive it.

``prepare`` places the model and creates its kernels; ``run`` feeds inputs positionally, in the
order of the graph's inputs that are not initializers, as onnx's test runner does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ep_host.session import InferenceSession

DEVICE_PROVIDERS = {"CPU": ["cpu"], "CUDA": ["cuda", "cpu"]}


def to_value(item: Any) -> Any:
    """A test-case value as ep-host takes it: TensorProto -> array, lists element-wise."""
    if isinstance(item, onnx.TensorProto):
        return onnx.numpy_helper.to_array(item)
    if isinstance(item, list | tuple):
        return [to_value(x) for x in item]
    if isinstance(item, np.generic):
        return np.asarray(item)
    return item


class EpHostRep(BackendRep):
    def __init__(self, session: InferenceSession):
        self.session = session
        self.input_names = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feed = {k: to_value(v) for k, v in inputs.items()}
        else:
            if not isinstance(inputs, list | tuple):
                inputs = [inputs]
            feed = dict(zip(self.input_names, (to_value(x) for x in inputs), strict=False))
        return tuple(self.session.run(None, feed))


class EpHostBackend(Backend):
    """Runs models on ep-host; ``device`` picks providers ("CPU": cpu; "CUDA": cuda then cpu),
    or pass ``providers=[...]`` explicitly."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> EpHostRep:
        providers: Sequence[str] | None = kwargs.pop("providers", None)
        if providers is None:
            providers = DEVICE_PROVIDERS.get(str(device).split(":")[0].upper(), ["cpu"])
        session = InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto)
                                   else model, list(providers), **kwargs)
        return EpHostRep(session)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        kind = str(device).split(":")[0].upper()
        if kind == "CPU":
            return True
        if kind == "CUDA":
            from ep_host.discovery import Host

            record = Host.discover(["cuda"]).records.get("cuda")
            return record is not None and record.available
        return False


prepare = EpHostBackend.prepare
run_model = EpHostBackend.run_model
supports_device = EpHostBackend.supports_device

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

from ep_host.discovery import Host
from ep_host.session import InferenceSession, select_providers


def device_providers(device: str, host: Host) -> list[str]:
    """The available providers whose device is of ``device``'s kind (the backend API's "CPU",
    "CUDA:0"...: ``Device.kind`` ``cpu``, ``cuda``), then those on the host, in the host's
    default order."""
    kind = str(device).split(":")[0].lower()
    available = [p for p in select_providers(host, None) if host.records[p].available]
    on_device = [p for p in available if host.records[p].info.device.kind == kind]
    on_host = [p for p in available if host.records[p].info.device.is_host]
    return list(dict.fromkeys([*on_device, *on_host]))


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
    """Runs models on ep-host; ``device`` picks the providers on that kind of device, then the
    host's ("CUDA": the CUDA EP, then the CPU EP), or pass ``providers=[...]`` explicitly."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> EpHostRep:
        providers: Sequence[str] | None = kwargs.pop("providers", None)
        if providers is None:
            host = kwargs.setdefault("host", Host.discover())
            providers = device_providers(device, host)
        session = InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto)
                                   else model, providers=list(providers), **kwargs)
        return EpHostRep(session)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        kind = str(device).split(":")[0].lower()
        host = Host.discover()
        return any(r.available and r.info.device.kind == kind for r in host.records.values())


prepare = EpHostBackend.prepare
run_model = EpHostBackend.run_model
supports_device = EpHostBackend.supports_device

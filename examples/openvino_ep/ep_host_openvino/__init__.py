"""OpenVINO as a third-party execution provider for ep-host: OpenVINO's own ONNX frontend decides
what it claims, its CPU plugin runs single nodes and compiles partitions. Hooks are in
``provider``."""

__version__ = "0.1.0"

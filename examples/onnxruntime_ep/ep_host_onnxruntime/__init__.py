"""onnxruntime's CPUExecutionProvider as an ep-host execution provider; the hooks live in
``provider``, the per-signature verdicts in ``probe``, the sessions in ``runtime``."""

__version__ = "0.1.0"

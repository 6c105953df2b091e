import json

from ep_host.match import KernelVariantSelection
from ep_host.tracing import Tracer, active_span, record_kernel_variant


class CountsFormatting:
    def __init__(self):
        self.calls = 0

    def __format__(self, spec):
        self.calls += 1
        return "x"


def test_nothing_is_recorded_or_formatted_without_a_span():
    arg = CountsFormatting()
    assert active_span() is None
    record_kernel_variant("gemm", "because {}", arg)
    assert arg.calls == 0


def test_variant_is_recorded_on_the_active_span():
    tracer = Tracer()
    with tracer.span("conv1", op_type="Conv") as span:
        record_kernel_variant("im2col_gemm", "kernel {}x{}", 3, 3)
    assert span.args["kernel_variant"] == "im2col_gemm"
    assert span.args["kernel_variant.reason"] == "kernel 3x3"
    assert active_span() is None


def test_staged_decisions_do_not_overwrite_the_primary_one():
    tracer = Tracer()
    with tracer.span("conv1") as span:
        record_kernel_variant("depthwise", "group == channels")
        record_kernel_variant("packed", "weights packed once", stage="pack")
        record_kernel_variant(KernelVariantSelection("tiled", "big", stage="loop"))
    assert span.args["kernel_variant"] == "depthwise"
    assert span.args["kernel_variant.reason"] == "group == channels"
    assert span.args["kernel_variant.pack"] == "packed"
    assert span.args["kernel_variant.loop"] == "tiled"


def test_spans_nest_and_restore():
    tracer = Tracer()
    with tracer.span("outer") as outer:
        with tracer.span("inner") as inner:
            record_kernel_variant("a")
        record_kernel_variant("b")
    assert inner.args["kernel_variant"] == "a"
    assert outer.args["kernel_variant"] == "b"


def test_trace_file_is_chrome_trace_json(tmp_path):
    tracer = Tracer()
    with tracer.span("node", provider="cpu"):
        pass
    path = tmp_path / "trace.json"
    tracer.write(path)
    data = json.loads(path.read_text())
    (event,) = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert event["ph"] == "X" and event["name"] == "node"
    assert event["args"]["provider"] == "cpu" and event["dur"] >= 0

import pytest

from ep_host import (
    CaptureSupport,
    Cost,
    Decline,
    KernelMatch,
    KernelVariantSelection,
    ReasonCode,
    deny,
    require,
)


class CountsFormatting:
    """An argument that counts how often it is formatted into a reason."""

    def __init__(self):
        self.calls = 0

    def __format__(self, spec):
        self.calls += 1
        return "formatted"


def test_supported_carries_cost_layouts_and_host_inputs():
    match = KernelMatch.supported(Cost(compute_us=2.0), required_input_layouts=["NCHW", None],
                                  output_layouts=["NCHW"], host_inputs=[1])
    assert match.is_supported and match.cost.total_us == 2.0
    assert match.required_input_layouts == ("NCHW", None)
    assert match.host_inputs == (1,)
    assert match.reason == "" and match.code is None


def test_supported_needs_a_cost():
    with pytest.raises(TypeError):
        KernelMatch.supported(3.0)


def test_unsupported_carries_reason_and_code():
    match = KernelMatch.unsupported("Conv: takes float32, got int8", code="dtype")
    assert not match.is_supported
    assert match.code is ReasonCode.DTYPE
    assert match.to_dict() == {"supported": False, "reason": "Conv: takes float32, got int8",
                               "code": "dtype"}


def test_unsupported_needs_a_reason_and_a_known_code():
    with pytest.raises(ValueError):
        KernelMatch.unsupported("")
    with pytest.raises(ValueError):
        KernelMatch.unsupported("why", code="bogus")


def test_codes_are_the_documented_set():
    assert {c.value for c in ReasonCode} == {
        "dtype", "shape", "attribute", "opset", "op", "device", "fault"}


def test_require_formats_only_on_failure():
    arg = CountsFormatting()
    require(True, "never {}", arg)
    assert arg.calls == 0
    with pytest.raises(Decline) as info:
        require(False, "Conv: got {}", arg, code="dtype")
    assert arg.calls == 0  # still lazy: formatted when the reason is read
    assert info.value.reason == "Conv: got formatted"
    assert info.value.code is ReasonCode.DTYPE
    assert arg.calls == 1


def test_deny_always_declines():
    with pytest.raises(Decline, match="not here") as info:
        deny("not {}", "here", code="device")
    assert info.value.code is ReasonCode.DEVICE


def test_capture_support():
    assert CaptureSupport.yes().capturable
    no = CaptureSupport.no("needs a host value from input {}", 1)
    assert not no.capturable and no.reason == "needs a host value from input 1"


def test_variant_selection_formats_lazily_and_keys_by_stage():
    arg = CountsFormatting()
    primary = KernelVariantSelection("im2col_gemm", "kernel {}", (arg,))
    staged = KernelVariantSelection("packed", "pack", stage="pack")
    assert arg.calls == 0
    assert primary.reason == "kernel formatted" and arg.calls == 1
    assert primary.key == "kernel_variant"
    assert staged.key == "kernel_variant.pack"


def test_the_walks_declines_equal_the_checked_ones_and_codes_resolve_as_the_enum_does():
    from ep_host.match import new_decline, reason_code

    for code in ReasonCode:
        fast, checked = new_decline("no", code), KernelMatch.unsupported("no", code)
        assert fast == checked and type(fast) is KernelMatch
        assert reason_code(code.value) is code and reason_code(code) is code
    assert Decline("no", code="dtype").code is ReasonCode.DTYPE
    with pytest.raises(ValueError):
        reason_code("nope")

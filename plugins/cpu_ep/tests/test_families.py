"""The op families the CPU EP prices with come from the kernels' own registrations
(``@kernel(..., family=...)``): the same ops and families the host's old table named."""

import pytest

from ep_host.kernels import REGISTRY

# The table ep_host.calibration held before each kernel declared its family.
FAMILIES = {
    "elementwise": (
        "Abs", "Add", "And", "BitShift", "Cast", "CastLike", "Ceil", "Clip", "Div", "Equal",
        "Floor", "Greater", "GreaterOrEqual", "IsInf", "IsNaN", "LeakyRelu", "Less",
        "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Not", "Or", "PRelu",
        "Reciprocal", "Relu", "Round", "Sign", "Sub", "Sum", "ThresholdedRelu", "Where", "Xor",
        "Dropout",
    ),
    "transcendental": (
        "Celu", "Cos", "Elu", "Erf", "Exp", "Gelu", "HardSigmoid", "HardSwish", "Log", "Mish",
        "Pow", "Selu", "Sigmoid", "Sin", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
    ),
    "matmul": ("MatMul", "Gemm", "MatMulInteger", "Einsum", "QLinearMatMul"),
    "conv": ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "Col2Im"),
    "pool": ("MaxPool", "AveragePool", "LpPool", "MaxRoiPool", "GlobalAveragePool",
             "GlobalLpPool", "GlobalMaxPool"),
    "reduce": (
        "ArgMax", "ArgMin", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
        "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
        "TopK", "CumSum",
    ),
    "normalization": (
        "BatchNormalization", "GroupNormalization", "Hardmax", "InstanceNormalization",
        "LayerNormalization", "LogSoftmax", "LpNormalization", "LRN",
        "MeanVarianceNormalization", "RMSNormalization", "Softmax",
    ),
    "data_movement": (
        "Concat", "DepthToSpace", "Expand", "Flatten", "Gather", "GatherElements", "GatherND",
        "Identity", "Pad", "Reshape", "Resize", "ScatterElements", "ScatterND", "Slice",
        "SpaceToDepth", "Split", "Squeeze", "Tile", "Transpose", "Unsqueeze", "Shape", "Size",
        "ConstantOfShape", "Range", "Trilu",
    ),
}
UNREGISTERED = {"MaxRoiPool"}  # in the old table, but no kernel computes it


def family_of(op_type):
    """The family the default-domain specs of ``op_type`` declare (all versions agree)."""
    families = {REGISTRY.specs[("ai.onnx", op_type, v)].family
                for v in REGISTRY.versions("ai.onnx", op_type)}
    assert len(families) <= 1, (op_type, families)
    return families.pop() if families else None


def test_family_of_groups_ops():
    assert family_of("Conv") == "conv"
    assert family_of("Gemm") == "matmul"
    assert family_of("Sigmoid") == "transcendental"
    assert family_of("Transpose") == "data_movement"
    assert family_of("NoSuchOp") is None


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_op_declares_the_family_of_the_old_table(family):
    for op in FAMILIES[family]:
        if op in UNREGISTERED:
            assert not REGISTRY.versions("ai.onnx", op)
        else:
            assert family_of(op) == family, op


def test_no_other_kernel_declares_a_family():
    listed = {op for ops in FAMILIES.values() for op in ops}
    declared = {op for (domain, op, _), spec in REGISTRY.specs.items()
                if spec.family is not None and domain == "ai.onnx"}
    assert declared == listed - UNREGISTERED
    # outside ai.onnx only FusedConv (a Conv with its activation, from the fusion pass) has one
    others = {(domain, op, spec.family) for (domain, op, _), spec in REGISTRY.specs.items()
              if spec.family is not None and domain != "ai.onnx"}
    assert others == {("com.microsoft", "FusedConv", "conv")}

"""Optimizer steps of the ``ai.onnx.preview.training`` domain: Adagrad, Adam and Momentum.

Each takes the learning rate R, the update count T, then its tensors grouped by role (all X,
then all G, then each state), and returns the new X for every tensor, then each new state.
"""

from __future__ import annotations

from ep_host import require
from ep_host.kernels.registry import kernel

TRAINING = "ai.onnx.preview.training"
REALS = frozenset({"float32", "float64"})


def _groups(tensors, roles):
    if len(tensors) % roles:
        raise ValueError(f"{len(tensors)} tensors do not split into {roles} equal groups")
    n = len(tensors) // roles
    return [tensors[i * n:(i + 1) * n] for i in range(roles)]


def _check_groups(roles, outputs_per_tensor):
    def check(node, provider):
        tensors = len(node.inputs) - 2
        require(tensors > 0 and tensors % roles == 0,
                "{}: after R and T the inputs must be {} equal groups, got {} tensors",
                node.op_type, roles, tensors, code="shape")
        n = tensors // roles
        require(len(node.outputs) <= n * outputs_per_tensor,
                "{}: {} tensors give at most {} outputs, got {}", node.op_type, n,
                n * outputs_per_tensor, len(node.outputs), code="shape")
        for v in node.inputs[2:]:
            if v is not None and v.dtype is not None:
                require(v.dtype.name in REALS, "{}: {} takes float32/float64 tensors, got "
                        "{} for {!r}", node.op_type, provider, v.dtype.name, v.name, code="dtype")

    return check


def _scalar(a):
    return a.reshape(())


@kernel("Adagrad", 1, domain=TRAINING, dtypes=REALS, host_inputs=(1,),
        check=_check_groups(3, 2))
def adagrad(xp, r, t, *tensors, decay_factor, epsilon, norm_coefficient):
    xs, gs, hs = _groups(tensors, 3)
    rate = _scalar(r) / (1 + _scalar(t) * decay_factor)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        g = norm_coefficient * x + g
        h = h + g * g
        new_x.append((x - rate * g / (xp.sqrt(h) + epsilon)).astype(x.dtype))
        new_h.append(h.astype(x.dtype))
    return tuple(new_x + new_h)


@kernel("Adam", 1, domain=TRAINING, dtypes=REALS, host_inputs=(1,), check=_check_groups(4, 3))
def adam(xp, r, t, *tensors, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post):
    xs, gs, vs, hs = _groups(tensors, 4)
    step = int(_scalar(t))
    rate = _scalar(r)
    if step > 0:
        rate = rate * xp.sqrt(1 - beta ** step) / (1 - alpha ** step)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        g = norm_coefficient * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * g * g
        x_new = x - rate * v / (xp.sqrt(h) + epsilon)
        new_x.append(((1 - norm_coefficient_post) * x_new).astype(x.dtype))
        new_v.append(v.astype(x.dtype))
        new_h.append(h.astype(x.dtype))
    return tuple(new_x + new_v + new_h)


def _check_momentum(node, provider):
    _check_groups(3, 2)(node, provider)
    mode = node.attributes.get("mode")
    require(mode in ("standard", "nesterov"), "Momentum: mode must be 'standard' or 'nesterov', "
            "got {!r}", mode, code="attribute")


@kernel("Momentum", 1, domain=TRAINING, dtypes=REALS, host_inputs=(1,), check=_check_momentum)
def momentum(xp, r, t, *tensors, alpha, beta, mode, norm_coefficient):
    xs, gs, vs = _groups(tensors, 3)
    rate = _scalar(r)
    scale = beta if int(_scalar(t)) > 0 else 1.0
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        g = norm_coefficient * x + g
        v = alpha * v + scale * g
        step = g + alpha * v if mode == "nesterov" else v
        new_x.append((x - rate * step).astype(x.dtype))
        new_v.append(v.astype(x.dtype))
    return tuple(new_x + new_v)

"""Recurrent layers: RNN, GRU and LSTM (versions 7 and later), one time step at a time.

All directions, both layouts, the activation list with its alphas and betas, ``clip``,
``sequence_lens`` (steps past a batch entry's length leave its state alone and write zeros to
``Y``), initial states, LSTM peepholes and ``input_forget``, GRU ``linear_before_reset``.
float16 and bfloat16 compute in float32. Versions 1 (and GRU 3) write the recurrence as
``Ht-1*R`` without the transpose that version 7 adds; they are not claimed.
"""

from __future__ import annotations

from ep_host import element_count, require
from ep_host.kernels.registry import FLOATS, kernel

RNN_TYPES = FLOATS | {"bfloat16"}
DIRECTIONS = ("forward", "reverse", "bidirectional")

# name -> (default alpha, default beta); None: the function takes no such parameter
ACTIVATIONS = {
    "relu": (None, None),
    "tanh": (None, None),
    "sigmoid": (None, None),
    "affine": (1.0, 0.0),
    "leakyrelu": (0.01, None),
    "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0),
    "hardsigmoid": (0.2, 0.5),
    "elu": (1.0, None),
    "softsign": (None, None),
    "softplus": (None, None),
}


def _sigmoid(xp, x):
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _apply(xp, name, alpha, beta, x):
    if name == "sigmoid":
        return _sigmoid(xp, x)
    if name == "tanh":
        return xp.tanh(x)
    if name == "relu":
        return xp.maximum(x, 0)
    if name == "affine":
        return alpha * x + beta
    if name == "leakyrelu":
        return xp.where(x >= 0, x, alpha * x)
    if name == "thresholdedrelu":
        return xp.where(x > alpha, x, 0)
    if name == "scaledtanh":
        return alpha * xp.tanh(beta * x)
    if name == "hardsigmoid":
        return xp.clip(alpha * x + beta, 0, 1)
    if name == "elu":
        return xp.where(x >= 0, x, alpha * (xp.exp(xp.minimum(x, 0)) - 1))
    if name == "softsign":
        return x / (1 + xp.abs(x))
    if name == "softplus":
        return xp.logaddexp(0, x)
    raise ValueError(f"unknown activation {name!r}")


def _activation_list(op, defaults, direction, activations, alphas, betas):
    """Per direction, the list of (name, alpha, beta) for each of the op's functions.

    ``activation_alpha``/``activation_beta`` are consumed in order by the functions that take
    the parameter; the others use their ONNX defaults."""
    dirs = 2 if direction == "bidirectional" else 1
    names = [a.lower() for a in activations] if activations else list(defaults) * dirs
    names = _one_direction(names, len(defaults), dirs)
    if len(names) != len(defaults) * dirs:
        raise ValueError(f"{op}: {len(defaults) * dirs} activations needed for direction "
                         f"{direction!r}, got {len(names)}")
    alphas, betas = list(alphas or ()), list(betas or ())
    out = []
    for name in names:
        if name not in ACTIVATIONS:
            raise ValueError(f"{op}: unknown activation {name!r}")
        alpha, beta = ACTIVATIONS[name]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        out.append((name, alpha, beta))
    per = len(defaults)
    return [out[d * per:(d + 1) * per] for d in range(dirs)]


def _one_direction(names, per, dirs):
    """RNN's schema default lists two functions even for one direction: a one-direction node
    whose list repeats the same functions for a second direction uses the first half."""
    if dirs == 1 and len(names) == 2 * per and names[:per] == names[per:]:
        return names[:per]
    return names


def check_recurrent(n_functions):
    def check(node, provider):
        op, attrs = node.op_type, node.attributes
        direction = attrs.get("direction", "forward")
        require(direction in DIRECTIONS, "{}: direction must be one of {}, got {!r}", op,
                "/".join(DIRECTIONS), direction, code="attribute")
        require(attrs.get("layout", 0) in (0, 1), "{}: layout must be 0 or 1, got {}", op,
                attrs.get("layout"), code="attribute")
        require("hidden_size" in attrs, "{}: {} needs the hidden_size attribute", op, provider,
                code="attribute")
        dirs = 2 if direction == "bidirectional" else 1
        activations = attrs.get("activations")
        if activations:
            names = _one_direction([a.lower() for a in activations], n_functions, dirs)
            require(len(names) == n_functions * dirs,
                    "{}: {} activations are needed for direction {!r}, got {}", op,
                    n_functions * dirs, direction, list(activations), code="attribute")
            unknown = [a for a in activations if a.lower() not in ACTIVATIONS]
            require(not unknown, "{}: {} implements the activations {}, got {}", op, provider,
                    ", ".join(sorted(ACTIVATIONS)), unknown, code="attribute")
        clip = attrs.get("clip")
        require(clip is None or clip > 0, "{}: clip must be positive, got {}", op, clip,
                code="attribute")
        seq = node.inputs[4] if len(node.inputs) > 4 else None
        if seq is not None and seq.dtype is not None:
            require(seq.dtype.name == "int32", "{}: sequence_lens must be int32, got {}", op,
                    seq.dtype.name, code="dtype")

    return check


def _recurrent_flops(n_gates):
    def flops(node):
        x, w = node.inputs[0], node.inputs[1]
        hidden = node.attributes.get("hidden_size", 1)
        if x is None or x.shape is None or w is None or w.shape is None or len(x.shape) != 3:
            return 0
        n = element_count(x.shape[:2])
        dirs = w.shape[0] if isinstance(w.shape[0], int) else 1
        inp = x.shape[2] if isinstance(x.shape[2], int) else 1
        return 2 * n * dirs * n_gates * hidden * (inp + hidden)

    return flops


class _Run:
    """What every step shares: the sequence, its mask, and the time order per direction."""

    def __init__(self, xp, x, sequence_lens, layout, direction):
        self.xp = xp
        self.dtype = x.dtype
        if x.dtype != xp.float64:
            x = x.astype(xp.float32)
        self.x = xp.swapaxes(x, 0, 1) if layout == 1 else x  # [seq, batch, input]
        self.seq, self.batch = self.x.shape[:2]
        self.layout = layout
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        if sequence_lens is None:
            self.lens = None
        else:
            self.lens = sequence_lens.astype(xp.int64).reshape(-1)
            if self.lens.shape[0] != self.batch:
                raise ValueError(f"sequence_lens has {self.lens.shape[0]} entries for a batch "
                                 f"of {self.batch}")

    def cast(self, a):
        return None if a is None else a.astype(self.x.dtype)

    def state(self, initial, d, hidden):
        if initial is None:
            return self.xp.zeros((self.batch, hidden), dtype=self.x.dtype)
        init = self.xp.swapaxes(initial, 0, 1) if self.layout == 1 else initial
        return init[d].astype(self.x.dtype)

    def steps(self, d):
        order = range(self.seq)
        return reversed(order) if self.directions[d] == "reverse" else order

    def active(self, t):
        """A [batch, 1] mask of the batch entries still inside their sequence at step ``t``."""
        if self.lens is None:
            return None
        return (t < self.lens).reshape(-1, 1)

    def outputs(self, ys, finals):
        """Y ([seq, dirs, batch, hidden], or layout 1) and each final state."""
        xp = self.xp
        y = xp.stack([xp.stack(per_dir, axis=0) for per_dir in ys], axis=1)
        states = [xp.stack(f, axis=0) for f in finals]
        if self.layout == 1:
            y = xp.transpose(y, (2, 0, 1, 3))
            states = [xp.swapaxes(s, 0, 1) for s in states]
        return (y.astype(self.dtype),) + tuple(s.astype(self.dtype) for s in states)


def _clip(xp, x, clip):
    return x if clip is None else xp.clip(x, -clip, clip)


def _keep(xp, mask, new, old):
    return new if mask is None else xp.where(mask, new, old)


def _emit(xp, mask, h):
    return h if mask is None else xp.where(mask, h, 0)


def _per_step_inputs(xp, x, w, b):
    """X @ W^T + Wb for every step at once: [seq, batch, gates*hidden]."""
    out = xp.matmul(x, w.T)
    return out if b is None else out + b


@kernel("RNN", 7, 14, 22, dtypes=RNN_TYPES, check=check_recurrent(1),
        flops=_recurrent_flops(1))
def rnn(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size,
        layout=0):
    run = _Run(xp, x, sequence_lens, layout, direction)
    acts = _activation_list("RNN", ("tanh",), direction, activations, activation_alpha,
                            activation_beta)
    w, r, b = run.cast(w), run.cast(r), run.cast(b)
    ys, hs = [], []
    for d in range(len(run.directions)):
        wb = rb = None
        if b is not None:
            wb, rb = b[d, :hidden_size], b[d, hidden_size:]
        xw = _per_step_inputs(xp, run.x, w[d], wb)
        h = run.state(initial_h, d, hidden_size)
        (f,) = acts[d]
        out = [None] * run.seq
        for t in run.steps(d):
            pre = xw[t] + xp.matmul(h, r[d].T)
            if rb is not None:
                pre = pre + rb
            new = _apply(xp, *f, _clip(xp, pre, clip))
            mask = run.active(t)
            out[t] = _emit(xp, mask, new)
            h = _keep(xp, mask, new, h)
        ys.append(out)
        hs.append(h)
    return run.outputs(ys, [hs])


@kernel("GRU", 7, 14, 22, dtypes=RNN_TYPES, check=check_recurrent(2),
        flops=_recurrent_flops(3))
def gru(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size,
        layout=0, linear_before_reset=0):
    run = _Run(xp, x, sequence_lens, layout, direction)
    acts = _activation_list("GRU", ("sigmoid", "tanh"), direction, activations,
                            activation_alpha, activation_beta)
    w, r, b = run.cast(w), run.cast(r), run.cast(b)
    n = hidden_size
    ys, hs = [], []
    for d in range(len(run.directions)):
        wb = rb = None
        if b is not None:
            wb, rb = b[d, :3 * n], b[d, 3 * n:]
        xw = _per_step_inputs(xp, run.x, w[d], wb)  # [z, r, h] blocks
        rz_r, rh = r[d, :2 * n], r[d, 2 * n:]
        h = run.state(initial_h, d, n)
        f, g = acts[d]
        out = [None] * run.seq
        for t in run.steps(d):
            zr = xw[t, :, :2 * n] + xp.matmul(h, rz_r.T)
            if rb is not None:
                zr = zr + rb[:2 * n]
            zr = _apply(xp, *f, _clip(xp, zr, clip))
            z, reset = zr[:, :n], zr[:, n:]
            if linear_before_reset:
                rec = xp.matmul(h, rh.T)
                if rb is not None:
                    rec = rec + rb[2 * n:]
                pre = xw[t, :, 2 * n:] + reset * rec
            else:
                pre = xw[t, :, 2 * n:] + xp.matmul(reset * h, rh.T)
                if rb is not None:
                    pre = pre + rb[2 * n:]
            cand = _apply(xp, *g, _clip(xp, pre, clip))
            new = (1 - z) * cand + z * h
            mask = run.active(t)
            out[t] = _emit(xp, mask, new)
            h = _keep(xp, mask, new, h)
        ys.append(out)
        hs.append(h)
    return run.outputs(ys, [hs])


@kernel("LSTM", 7, 14, 22, dtypes=RNN_TYPES, check=check_recurrent(3),
        flops=_recurrent_flops(4))
def lstm(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
         activation_alpha=None, activation_beta=None, activations=None, clip=None,
         direction="forward", hidden_size, input_forget=0, layout=0):
    run = _Run(xp, x, sequence_lens, layout, direction)
    acts = _activation_list("LSTM", ("sigmoid", "tanh", "tanh"), direction, activations,
                            activation_alpha, activation_beta)
    w, r, b, p = run.cast(w), run.cast(r), run.cast(b), run.cast(p)
    n = hidden_size
    ys, hs, cs = [], [], []
    for d in range(len(run.directions)):
        bias = None if b is None else b[d, :4 * n] + b[d, 4 * n:]
        xw = _per_step_inputs(xp, run.x, w[d], bias)  # [i, o, f, c] blocks
        pi = po = pf = None
        if p is not None:
            pi, po, pf = p[d, :n], p[d, n:2 * n], p[d, 2 * n:]
        h = run.state(initial_h, d, n)
        c = run.state(initial_c, d, n)
        f, g, hh = acts[d]
        out = [None] * run.seq
        for t in run.steps(d):
            pre = xw[t] + xp.matmul(h, r[d].T)
            pre_i, pre_o, pre_f, pre_c = (pre[:, k * n:(k + 1) * n] for k in range(4))
            if pi is not None:
                pre_i = pre_i + pi * c
                pre_f = pre_f + pf * c
            i = _apply(xp, *f, _clip(xp, pre_i, clip))
            if input_forget:
                forget = 1 - i
            else:
                forget = _apply(xp, *f, _clip(xp, pre_f, clip))
            cell = _apply(xp, *g, _clip(xp, pre_c, clip))
            c_new = forget * c + i * cell
            if po is not None:
                pre_o = pre_o + po * c_new
            o = _apply(xp, *f, _clip(xp, pre_o, clip))
            h_new = o * _apply(xp, *hh, c_new)
            mask = run.active(t)
            out[t] = _emit(xp, mask, h_new)
            h = _keep(xp, mask, h_new, h)
            c = _keep(xp, mask, c_new, c)
        ys.append(out)
        hs.append(h)
        cs.append(c)
    return run.outputs(ys, [hs, cs])

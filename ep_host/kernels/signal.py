"""Signal processing: DFT (the version-17 axis attribute and the version-20 axis input), STFT,
the Hann, Hamming and Blackman windows, and MelWeightMatrix.

A complex tensor is a real one whose last axis holds (real, imaginary). Transforms run in
float64 for float64 input and in float32 otherwise (float16 and bfloat16 round back once).
"""

from __future__ import annotations

import math

import ep_host
from ep_host import require
from ep_host.kernels.registry import FLOATS, INTS, kernel

SIGNAL_TYPES = FLOATS | {"bfloat16"}
WINDOW_TYPES = FLOATS | {"bfloat16"} | INTS
INDEX_TYPES = frozenset({"int32", "int64"})


def _scalar(a) -> int:
    return int(a.reshape(-1)[0])


def _work_type(xp, dtype):
    return xp.float64 if dtype == xp.float64 else xp.float32


def _as_complex(xp, x):
    """The complex values of a [..., 1] (real) or [..., 2] (complex) tensor, and whether real."""
    if x.shape[-1] == 1:
        return x[..., 0].astype(_work_type(xp, x.dtype)), True
    if x.shape[-1] == 2:
        work = _work_type(xp, x.dtype)
        return x[..., 0].astype(work) + 1j * x[..., 1].astype(work), False
    raise ValueError(f"the last axis holds (real) or (real, imaginary): size 1 or 2, got "
                     f"{x.shape[-1]}")


def _pack(xp, z, dtype, real=False):
    if real:
        return z.real[..., None].astype(dtype)
    return xp.stack([z.real, z.imag], axis=-1).astype(dtype)


def _dft(xp, x, length, axis, inverse, onesided):
    rank = x.ndim
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ValueError(f"axis {axis} is out of [-{rank}, -2] U [0, {rank - 2}]")
    axis = axis % rank
    z, real = _as_complex(xp, x)
    if onesided and not inverse:
        if not real:
            raise ValueError("a one-sided forward DFT takes real input ([..., 1])")
        return _pack(xp, xp.fft.rfft(z, n=length, axis=axis), x.dtype)
    if onesided:
        if real:
            raise ValueError("a one-sided inverse DFT takes complex input ([..., 2])")
        n = length if length is not None else 2 * (z.shape[axis] - 1)
        if n // 2 + 1 != z.shape[axis]:
            raise ValueError(f"a one-sided inverse DFT of length {n} takes {n // 2 + 1} bins, "
                             f"got {z.shape[axis]}")
        return _pack(xp, xp.fft.irfft(z, n=n, axis=axis), x.dtype, real=True)
    fn = xp.fft.ifft if inverse else xp.fft.fft
    return _pack(xp, fn(z, n=length, axis=axis), x.dtype)


def _check_dft(node, provider):
    attrs = node.attributes
    x = node.inputs[0]
    length = node.inputs[1] if len(node.inputs) > 1 else None
    if length is not None and length.dtype is not None:
        require(length.dtype.name in INDEX_TYPES, "DFT: dft_length must be int32/int64, got {}",
                length.dtype.name, code="dtype")
    last = x.shape[-1] if x is not None and x.shape else None
    if isinstance(last, int):
        require(last in (1, 2), "DFT: the input's last axis must be 1 (real) or 2 (complex), "
                "got {}", last, code="shape")
        if attrs.get("onesided", 0):
            inverse = attrs.get("inverse", 0)
            require(last == (2 if inverse else 1),
                    "DFT: onesided={} inverse={} takes {} input, got last axis {}",
                    1, inverse, "complex" if inverse else "real", last, code="shape")


@kernel("DFT", 17, dtypes=SIGNAL_TYPES, host_inputs=(1,), check=_check_dft)
def dft_17(xp, x, dft_length=None, *, axis, inverse, onesided):
    length = None if dft_length is None else _scalar(dft_length)
    return _dft(xp, x, length, axis, inverse, onesided)


@kernel("DFT", 20, dtypes=SIGNAL_TYPES, host_inputs=(1, 2), check=_check_dft)
def dft_20(xp, x, dft_length=None, axis=None, *, inverse, onesided):
    length = None if dft_length is None else _scalar(dft_length)
    return _dft(xp, x, length, -2 if axis is None else _scalar(axis), inverse, onesided)


def _check_stft(node, provider):
    x = node.inputs[0]
    if x is not None and x.shape is not None:
        require(len(x.shape) == 3, "STFT: the signal must be rank 3 [batch, length, 1 or 2], "
                "got shape {}", x.shape, code="shape")
        last = x.shape[-1]
        if isinstance(last, int):
            require(last in (1, 2), "STFT: the signal's last axis must be 1 (real) or 2 "
                    "(complex), got {}", last, code="shape")
            require(last == 1 or not node.attributes.get("onesided", 1),
                    "STFT: onesided=1 takes a real signal; set onesided=0 for complex input",
                    code="attribute")


@kernel("STFT", 17, dtypes=SIGNAL_TYPES, host_inputs=(1, 3), check=_check_stft)
def stft(xp, signal, frame_step, window=None, frame_length=None, *, onesided):
    step = _scalar(frame_step)
    z, real = _as_complex(xp, signal)  # [batch, length]
    length = z.shape[1]
    if frame_length is not None:
        size = _scalar(frame_length)
        if window is not None and window.shape[0] != size:
            raise ValueError(f"the window has {window.shape[0]} values, frame_length is {size}")
    else:
        size = window.shape[0] if window is not None else length
    if step < 1 or size < 1 or size > length:
        raise ValueError(f"frame_step {step} and frame_length {size} do not fit a signal of "
                         f"length {length}")
    frames = (length - size) // step + 1
    starts = xp.arange(frames) * step
    picked = z[:, starts[:, None] + xp.arange(size)[None, :]]  # [batch, frames, size]
    if window is not None:
        picked = picked * window.astype(picked.real.dtype)
    if onesided:
        if not real:
            raise ValueError("onesided=1 takes a real signal")
        spectrum = xp.fft.rfft(picked, axis=-1)
    else:
        spectrum = xp.fft.fft(picked, axis=-1)
    return _pack(xp, spectrum, signal.dtype)


# ---------------------------------------------------------------------------------------------
# Windows and the mel filter bank
# ---------------------------------------------------------------------------------------------


def _output_type(node_attr_code):
    return ep_host.dtype(node_attr_code).numpy


def _check_output_datatype(node, provider):
    code = node.attributes.get("output_datatype", 1)
    try:
        name = ep_host.dtype(code).name
    except ValueError:
        name = str(code)
    require(name in WINDOW_TYPES, "{}: {} writes {} output, got output_datatype {}",
            node.op_type, provider, "/".join(sorted(WINDOW_TYPES)), name, code="attribute")


def _cosine_window(xp, size, periodic, output_datatype, coefficients):
    n = _scalar(size)
    if n < 0:
        raise ValueError(f"window size must be >= 0, got {n}")
    period = n if periodic else n - 1
    if period < 1:  # a symmetric window of one point: 0 / 0 in the formula; numpy's is [1]
        return xp.ones(n, dtype=_output_type(output_datatype))
    k = xp.arange(n, dtype=xp.float64)
    w = xp.zeros(n, dtype=xp.float64)
    for i, a in enumerate(coefficients):
        w = w + (-1) ** i * a * (xp.cos(2 * math.pi * i * k / period) if i else 1.0)
    return w.astype(_output_type(output_datatype))


@kernel("HannWindow", 17, dtypes=INDEX_TYPES, host_inputs=(0,), check=_check_output_datatype)
def hann_window(xp, size, *, output_datatype, periodic):
    return _cosine_window(xp, size, periodic, output_datatype, (0.5, 0.5))


@kernel("HammingWindow", 17, dtypes=INDEX_TYPES, host_inputs=(0,),
        check=_check_output_datatype)
def hamming_window(xp, size, *, output_datatype, periodic):
    return _cosine_window(xp, size, periodic, output_datatype, (25 / 46, 21 / 46))


@kernel("BlackmanWindow", 17, dtypes=INDEX_TYPES, host_inputs=(0,),
        check=_check_output_datatype)
def blackman_window(xp, size, *, output_datatype, periodic):
    return _cosine_window(xp, size, periodic, output_datatype, (0.42, 0.5, 0.08))


def _hertz_to_mel(f):
    return 2595 * math.log1p(f / 700) / math.log(10)


def _mel_to_hertz(m):
    return 700 * math.expm1(m / 2595 * math.log(10))


@kernel("MelWeightMatrix", 17, dtypes=INDEX_TYPES, host_inputs=(0, 1, 2, 3, 4),
        check=_check_output_datatype)
def mel_weight_matrix(xp, num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, *, output_datatype):
    """Triangles between num_mel_bins + 2 points evenly spaced on the mel scale (step
    (high - low) / (num_mel_bins + 2)), each point on spectrogram bin
    floor((dft_length + 1) * hertz / sample_rate); a triangle of zero rising width is 1 at its
    centre. This is the construction of onnx's test case and onnxruntime."""
    bins, n_fft, rate = _scalar(num_mel_bins), _scalar(dft_length), _scalar(sample_rate)
    low = _hertz_to_mel(float(lower_edge_hertz.reshape(-1)[0]))
    high = _hertz_to_mel(float(upper_edge_hertz.reshape(-1)[0]))
    step = (high - low) / (bins + 2)
    points = [math.floor((n_fft + 1) * _mel_to_hertz(i * step + low) / rate)
              for i in range(bins + 2)]
    n_spectrogram = n_fft // 2 + 1
    if bins < 1 or rate <= 0 or max(points[:-1]) >= n_spectrogram or points[-1] > n_spectrogram \
            or min(points) < 0:
        raise ValueError(f"mel points {points} fall outside the {n_spectrogram} spectrogram bins")
    out = [[0.0] * bins for _ in range(n_spectrogram)]
    for i in range(bins):
        left, centre, right = points[i], points[i + 1], points[i + 2]
        if centre == left:
            out[centre][i] = 1.0
        else:
            for j in range(left, centre + 1):
                out[j][i] = (j - left) / (centre - left)
        for j in range(centre, right):
            out[j][i] = (right - j) / (right - centre)
    return xp.asarray(out, dtype=xp.float64).reshape(n_spectrogram, bins).astype(
        _output_type(output_datatype))

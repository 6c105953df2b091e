"""An execution plan's steps compiled to one straight-line Python function.

Every value slot becomes a local variable and every step one call, so a run pays no list
indexing, no per-step dispatch and no tuple for one-output kernels (``Kernel.call``). Outputs
are still checked on every run, by one identity test of class and dtype (plus the static shape)
that falls back to the full check only when it fails; a dead input is handed to a kernel that
declares ``inplace`` when nothing else refers to its buffer (CPython's reference count says so).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FILENAME = "<ep-host plan>"


def _baseline_refcount() -> int:
    """What ``sys.getrefcount`` says of an array held by one local variable only."""
    probe = np.empty(1)
    return sys.getrefcount(probe)


SOLE_OWNER = _baseline_refcount()


DONATE_BYTES = 256 * 1024
"""Outputs at least this big reuse a dead input's buffer (numpy elides temporaries from the
same size on); below it a fresh array is as cheap as the test for a donor."""


def _worth_donating(dtype: Any, shape: tuple[Any, ...] | None) -> bool:
    if dtype is None or shape is None or any(d is None for d in shape):
        return False
    count = 1
    for d in shape:
        count *= d
    return count * np.dtype(dtype).itemsize >= DONATE_BYTES


class CompiledRun:
    """``run(values)`` for a list of steps; built once per plan.

    ``values`` holds the plan's initial slots (inputs, outer-scope values; constants are bound
    into the function). Returns the output slots' values in ``output_slots`` order.
    ``lines[i]`` is the step that line ``i`` of the generated source belongs to.
    """

    def __init__(self, steps: Sequence[Any], inputs: Sequence[int], constants: dict[int, Any],
                 output_slots: Sequence[int], keep: set[int], check: Callable[..., Any],
                 check_count: Callable[..., Any]):
        self.check_lines: set[int] = set()  # lines whose failure is the host's own error
        names: dict[str, Any] = {
            "nd": np.ndarray, "rc": sys.getrefcount, "chk": check, "chkn": check_count,
            "SOLE": SOLE_OWNER, "tuple": tuple, "list": list, "len": len,
        }
        lines: list[str] = []
        owner: list[int] = []

        def emit(text: str, step: int = -1) -> None:
            lines.append(text)
            owner.append(step)
            if "chk" in text:
                self.check_lines.add(len(lines))

        for s, value in constants.items():
            names[f"c{s}"] = value

        def ref(s: int) -> str:
            if s < 0:
                return "None"
            return f"c{s}" if s in constants else f"v{s}"

        emit("def run(values):")
        for s in inputs:
            emit(f"    v{s} = values[{s}]")
        for i, step in enumerate(steps):
            args = ", ".join(ref(s) for s in step.inputs)
            if step.copy is not None:
                src, dst = step.copy
                names[f"down{i}"], names[f"up{i}"] = src.download, dst.upload
                emit(f"    v{step.outputs[0]} = up{i}(down{i}({args}))", i)
            else:
                self._emit_node(emit, names, i, step, args, keep, ref)
            for s in step.release:
                if s not in constants:
                    emit(f"    v{s} = None", i)
        emit("    return [" + ", ".join(ref(s) for s in output_slots) + "]")
        source = "\n".join(lines) + "\n"
        code = compile(source, FILENAME, "exec")
        exec(code, names)  # noqa: S102 (our own generated source, built from slot numbers)
        self.run: Callable[[list[Any]], list[Any]] = names["run"]
        self.lines = [-1, *owner]  # line numbers start at 1
        self.source = source

    @staticmethod
    def _emit_node(emit: Callable[..., None], names: dict[str, Any], i: int, step: Any,
                   args: str, keep: set[int], ref: Callable[[int], str]) -> None:
        kernel = step.kernel
        indent = "    "
        if step.lock is not None:
            names[f"L{i}"] = step.lock
            emit(f"    with L{i}:", i)
            indent = "        "
        scope = ""
        if step.scope:
            scope = "scope={" + ", ".join(f"{n!r}: {ref(s)}" for n, s in step.scope) + "}"
        live = [s for s in step.outputs if s >= 0]
        single = (kernel.call is not None and len(step.outputs) == 1 and live and not scope)
        if single:
            names[f"k{i}"] = kernel.call
            out = step.outputs[0]
            donor = CompiledRun._donor(step, keep)
            dtype, shape = step.expect[0]
            if donor is not None and _worth_donating(dtype, shape):
                # the donor must be the output's own dtype and shape, held by nothing else
                names[f"t{i}_d"] = np.dtype(dtype)
                emit(f"{indent}d = v{donor} if v{donor}.__class__ is nd and v{donor}.base is None"
                     f" and v{donor}.dtype is t{i}_d and v{donor}.shape == {tuple(shape)!r}"
                     f" and v{donor}.flags.writeable and rc(v{donor}) == SOLE else None", i)
                emit(f"{indent}v{out} = k{i}({args}, out=d) if d is not None else k{i}({args})",
                     i)
                emit(f"{indent}d = None", i)
            else:
                emit(f"{indent}v{out} = k{i}({args})", i)
            CompiledRun._emit_check(emit, names, i, 0, out, step.expect[0], indent, single=True)
            return
        names[f"k{i}"] = kernel.run
        call_args = ", ".join(a for a in (args, scope) if a)
        emit(f"{indent}r = k{i}({call_args})", i)
        need = sum(1 for s in step.outputs if s >= 0)
        emit(f"{indent}if (r.__class__ is not tuple and r.__class__ is not list) or len(r) < "
             f"{need}: r = chkn({i}, r)", i)
        for j, s in enumerate(step.outputs):
            if s < 0:
                continue
            emit(f"{indent}v{s} = r[{j}]", i)
            CompiledRun._emit_check(emit, names, i, j, s, step.expect[j], indent)
        emit(f"{indent}r = None", i)

    @staticmethod
    def _donor(step: Any, keep: set[int]) -> int | None:
        """The input slot the kernel may write its output into: dead after this step, not kept,
        read once by it."""
        for index in step.kernel.inplace:
            if index >= len(step.inputs):
                continue
            s = step.inputs[index]
            if s < 0 or s in keep or s not in step.release:
                continue
            if step.inputs.count(s) != 1 or any(s == o for _, o in step.scope):
                continue
            return s
        return None

    @staticmethod
    def _emit_check(emit: Callable[..., None], names: dict[str, Any], i: int, j: int, s: int,
                    expect: tuple[Any, Any], indent: str, single: bool = False) -> None:
        """The quick test of one output; ``single``: the value came from ``Kernel.call``, which
        may return a tuple (the full check takes its first entry)."""
        dtype, shape = expect
        if dtype is None:
            if shape is not None:  # no dtype to test: the full check decides on the shape
                emit(f"{indent}v{s} = chk({i}, {j}, v{s})", i)
            elif single:
                emit(f"{indent}if v{s}.__class__ is not nd: v{s} = chk({i}, {j}, v{s})", i)
            return
        names[f"t{i}_{j}"] = np.dtype(dtype)
        test = f"v{s}.__class__ is not nd or v{s}.dtype is not t{i}_{j}"
        if shape is not None:
            if all(d is not None for d in shape):
                test += f" or v{s}.shape != {tuple(shape)!r}"
            else:
                test += f" or v{s}.ndim != {len(shape)}"
                test += "".join(f" or v{s}.shape[{a}] != {d}"
                                for a, d in enumerate(shape) if d is not None)
        emit(f"{indent}if {test}: v{s} = chk({i}, {j}, v{s})", i)

    def failed_line(self, tb: Any) -> int | None:
        """The generated line that raised, from a traceback (``None``: not from our code)."""
        found = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == FILENAME:
                found = tb.tb_lineno
            tb = tb.tb_next
        return found


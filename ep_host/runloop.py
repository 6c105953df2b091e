"""What running a step means, written once, and the straight-line function a plan becomes.

:class:`StepChecks` says what the host does with a kernel's results (count, normalise, check
dtype, shape and size; name the step that failed). :class:`CompiledSteps` turns a list of plan
steps into one generated Python function (a local per value slot, one call per step, dead slots
freed); tracing, cancellation and the size limit are flags of that one generator, and device-graph
recording runs its steps through it too. :class:`PlanRun` runs a whole plan.
"""

from __future__ import annotations

import contextvars
import itertools
import sys
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ep_host import plugin_calls
from ep_host.code_cache import compiled_code
from ep_host.cost import element_count
from ep_host.errors import (
    HostError,
    KernelError,
    ResourceLimitError,
    RunCancelledError,
    describe_exception,
)
from ep_host.plugin_calls import is_user_interrupt, marker_head, sigint
from ep_host.sole import SOLE_OWNER, sole_view
from ep_host.threads import HELD, POOLS, SINGLE_THREAD_VALUES, run_holder

if TYPE_CHECKING:
    from ep_host.plan import Plan, Step
    from ep_host.tracing import Tracer

FILENAME = "<ep-host plan {}>"
_numbers = itertools.count(1)


DONATE_BYTES = 256 * 1024
"""Outputs at least this big reuse a dead input's buffer (numpy elides temporaries from the
same size on); below it a fresh array is as cheap as the test for a donor."""


STEPS_PER_FUNCTION = 500
"""A plan longer than this runs as a chain of generated functions of at most this many steps:
compiling one costs about 17 KB a step at its peak (SSD-lite's 2,072 steps in one function: 32
MiB), and a link boundary only hands on the live values (microseconds a run)."""


def _worth_donating(dtype: Any, shape: tuple[Any, ...] | None) -> bool:
    if dtype is None or shape is None or any(d is None for d in shape):
        return False
    return element_count(shape) * np.dtype(dtype).itemsize >= DONATE_BYTES


OPAQUE = "opaque"
"""An output's array kind on a device that does not say what its arrays are."""

ANY_VALUE = "any value"
"""An output's kind on the host when loading could not tell tensor from sequence or map."""

_NEVER_ARRAYS = (list, tuple, dict, set, frozenset, str, bytes, bool, int, float, complex)


def array_kind(device: Any, value_kind: str) -> Any:
    """What an output of ``value_kind`` ("tensor", "sequence", ...) must be on ``device``: a
    class (or tuple of classes), :data:`OPAQUE`, :data:`ANY_VALUE` or ``None`` (not checked)."""
    if value_kind not in ("tensor", "unknown"):
        return None
    if device.is_host:
        return np.ndarray if value_kind == "tensor" else ANY_VALUE
    return device.array_type if device.array_type is not None else OPAQUE


def not_an_array(out: Any, kind: Any) -> str:
    """Why ``out`` is not an output of ``kind`` (see :func:`array_kind`); ``""`` when it is."""
    if kind is None:
        return ""
    if kind is np.ndarray:
        ok = out.__class__ is np.ndarray
    elif kind is ANY_VALUE:
        ok = out is None or out.__class__ in (np.ndarray, list, dict)
    elif kind is OPAQUE:
        ok = out is not None and not isinstance(out, _NEVER_ARRAYS) and not (
            hasattr(out, "__next__") or hasattr(out, "__await__"))
    else:
        ok = isinstance(out, kind)
    if ok:
        return ""
    cls = type(out)
    name = cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    want = ("an array" if kind in (OPAQUE, ANY_VALUE) else
            " or ".join(f"{k.__module__}.{k.__qualname__}"
                        for k in (kind if isinstance(kind, tuple) else (kind,))))
    return f"type {name}, expected {want}"


class RunToken:
    """What a cancellable run reads before every step: ``terminate`` is true once the caller's
    ``RunOptions.terminate`` is set or the run's time is up (``expire``); ``at`` names the step
    running now (for the message of a run abandoned by its timeout)."""

    __slots__ = ("options", "expired", "at")

    def __init__(self, options: Any = None):
        self.options = options
        self.expired = False
        self.at = ""

    @property
    def terminate(self) -> bool:
        return self.expired or bool(getattr(self.options, "terminate", False))


CURRENT_RUN: contextvars.ContextVar[RunToken | None] = contextvars.ContextVar(
    "ep_host_current_run", default=None)
"""The token of the cancellable run this thread is in, so that control-flow bodies (a Loop's
body, run once per iteration) stop too."""


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``'s data as a read-only array that no kernel can make writeable: its base is a
    read-only buffer, not ``array``, so ``flags.writeable = True`` is refused (numpy checks the
    base). Arrays that export no buffer (objects, strings) are copied first."""
    dtype = array.dtype
    if array.flags.c_contiguous and not dtype.hasobject:
        try:
            buffer = memoryview(array).toreadonly()
            # the buffer's own format and shape: one call where numpy knows the format (the
            # plain numeric types), else its bytes as the array's dtype
            out = np.asarray(buffer)
            if out.dtype != dtype:
                out = np.frombuffer(buffer, dtype).reshape(array.shape)
        except (TypeError, ValueError, BufferError):
            pass
        else:
            return out
    owner = np.array(array, copy=True, order="C")
    owner.flags.writeable = False
    view = owner.view()  # its base is the read-only copy, which no kernel is handed
    return view


class StepChecks:
    """What a step does with what its kernel returned, for every kind of run.

    A kernel's ``run`` returns a sequence with an entry per wanted output; a numpy scalar
    becomes a 0-d array; every tensor output must be an array of its device's array type
    (exactly ``numpy.ndarray`` on the host), of the declared dtype and, where shape inference
    knows it, of the static shape, or the step fails with a :class:`KernelError`; with
    ``max_tensor_bytes`` an output over the limit is an error. Every failure names the model
    (``label``), the step, its provider and the output.
    """

    def __init__(self, label: str, *, max_tensor_bytes: int | None = None,
                 warnings: list[str] | None = None):
        self.label = label
        self.max_tensor_bytes = max_tensor_bytes
        self.warnings = [] if warnings is None else warnings

    def failure(self, step: Step, exc: BaseException) -> HostError:
        """The error for a step that raised ``exc``: the copy, or the step and its provider; a
        kernel out of memory (or over the size limit before allocating) is a
        :class:`ResourceLimitError`."""
        if step.copy is not None:
            src, dst = step.copy
            return KernelError(f"{self.label}: copying a tensor from {src.name} to {dst.name} "
                               f"failed: {describe_exception(exc)}")
        where = f"{self.label}: {step.subject} ({step.op}) on provider {step.provider!r}"
        if isinstance(exc, ResourceLimitError):
            return ResourceLimitError(f"{where}: {exc}")
        if isinstance(exc, MemoryError):
            return ResourceLimitError(f"{where} ran out of memory during a run of the model"
                                      f"{_requested(exc)}: "
                                      f"{describe_exception(exc)}")
        return KernelError(f"{self.label}: {step.subject} ({step.op}) failed on provider "
                           f"{step.provider!r}: {describe_exception(exc)}")

    def count(self, step: Step, outs: Any) -> Sequence[Any]:
        """A kernel's ``run`` must return a sequence with an entry per wanted output."""
        if not isinstance(outs, Sequence) or len(outs) < sum(1 for s in step.outputs if s >= 0):
            got = len(outs) if isinstance(outs, Sequence) else type(outs).__name__
            raise KernelError(
                f"{self.label}: {step.subject} on provider {step.provider!r} returned {got} "
                f"output(s), expected {len(step.outputs)}")
        return outs

    def called(self, step: Step, out: Any) -> Any:
        """The full check of what ``Kernel.call`` returned (it may be a tuple of outputs, of
        which the first is the one wanted)."""
        if type(out) is tuple and out:
            out = out[0]
        return self.output(step, 0, out)

    def output(self, step: Step, index: int, out: Any) -> Any:
        """Output ``index`` of ``step``, normalised and checked; the generated code calls this
        when its quick test of class, dtype and static shape fails, or always under a limit."""
        if isinstance(out, np.generic):
            out = np.asarray(out)
        if index >= len(step.expect):
            return out
        dtype, shape, kind = step.expect[index]
        problem = not_an_array(out, kind)
        if problem:
            self._bad_output(step, index, problem)
        got_dtype = getattr(out, "dtype", None)
        got_shape = getattr(out, "shape", None)
        if dtype is not None and got_dtype is not None and got_dtype != dtype:
            self._bad_output(step, index, f"dtype {got_dtype}, expected {np.dtype(dtype)}")
        if shape is not None and got_shape is not None and (
                len(got_shape) != len(shape)
                or any(w is not None and w != g for w, g in zip(shape, got_shape,
                                                               strict=False))):
            self._bad_output(step, index, f"shape {list(got_shape)}, expected "
                                          f"{[d if d is not None else '?' for d in shape]} "
                                          "(by shape inference)")
        limit = self.max_tensor_bytes
        if limit is not None and getattr(out, "nbytes", 0) > limit:
            # shapes known only now are checked right after the kernel returns; the tensor
            # is dropped with this exception and the session stays usable
            raise ResourceLimitError(
                f"{self.label}: output {index} of {step.subject} ({step.op}) on provider "
                f"{step.provider!r} takes {out.nbytes} bytes (shape {list(got_shape or ())}), "
                f"over the limit of {limit} (max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)"
                f"{_output_name(step, index)}")
        return out

    def copied(self, step: Step, out: Any) -> Any:
        """What a copy to the host returned: it must be a numpy array (a numpy scalar becomes a
        0-d array)."""
        if isinstance(out, np.generic):
            return np.asarray(out)
        if out.__class__ is not np.ndarray:
            src, _ = step.copy  # type: ignore[misc]
            raise KernelError(
                f"{self.label}: device {src.name!r} returned {not_an_array(out, np.ndarray)} "
                f"when {step.name} ({src.name} -> host) was copied (Device.to_host)")
        return out

    def cancelled(self, step: Step | None, cancel: Any = None, graph: str = "") -> NoReturn:
        where = (f"body {graph!r}" if step is None else "a device copy"
                 if step.copy is not None else step.subject)
        why = ("its time limit (RunOptions.timeout_s) ran out"
               if getattr(cancel, "expired", False) else "RunOptions.terminate")
        raise RunCancelledError(f"{self.label}: the run was cancelled ({why}) before {where}")

    def _bad_output(self, step: Step, index: int, what: str) -> NoReturn:
        raise KernelError(f"{self.label}: {step.subject} ({step.op}) on provider "
                          f"{step.provider!r} returned output {index} with {what}"
                          f"{_output_name(step, index)}")


def _output_name(step: Step, index: int) -> str:
    names = step.output_names
    return f" (value {names[index]!r})" if index < len(names) else ""


def _requested(exc: BaseException) -> str:
    """`` (requested N bytes, shape [...])`` from numpy's allocation error, when it says."""
    shape = getattr(exc, "shape", None)
    dtype = getattr(exc, "dtype", None)
    if shape is None or dtype is None:
        return ""
    try:
        nbytes = element_count(tuple(shape)) * np.dtype(dtype).itemsize
    except (TypeError, ValueError):
        return ""
    return f" (requested {nbytes} bytes for shape {list(shape)} of {np.dtype(dtype)})"


class CompiledSteps:
    """``steps`` compiled to one function; ``run(values, cancel)`` returns ``outputs``' values.

    ``values`` maps the ``inputs`` slots to their values (graph inputs, outer-scope values);
    ``constants`` (slot -> value) are bound into the function. ``releases[i]``: the slots freed
    after step ``i`` (none when not given); ``keep``: slots a kernel may never write into.
    Flags, each adding lines to every step: ``tracer`` (a span per step), ``cancellable``
    (``cancel.terminate`` is read before every step), ``check_all`` (every output takes the full
    check, as the size limit needs).

    ``blas_limit``: the BLAS threads runs hold the pools at (0: none), held lazily where the plan
    is one function (``holds_blas``): from the first step calling BLAS (``Kernel.uses_blas``)
    with an input, or a known output, of over ``SINGLE_THREAD_VALUES`` values to the run's end.
    A run of small values (a scikit-learn export's few rows) never touches the pools (holding
    them cost it 6-9 us). A product of small inputs and an output of unknown size (an outer
    product of dynamic size) is not held to the limit.

    A kernel that raises is named by :meth:`StepChecks.failure`; the host's own errors (a
    check, a cancellation) pass through as they are.
    """

    def __init__(self, steps: Sequence[Step], inputs: Sequence[int], constants: Mapping[int, Any],
                 outputs: Sequence[int], keep: set[int] | frozenset[int], checks: StepChecks, *,
                 releases: Sequence[Sequence[int]] = (), tracer: Tracer | None = None,
                 cancellable: bool = False, check_all: bool = False, blas_limit: int = 0):
        self.steps = tuple(steps)
        self.checks = checks
        self.filename = FILENAME.format(next(_numbers))
        self._check_all = check_all
        self._own = bytearray()  # per line: 1 where its failure is the host's own error
        self._owner = array("q")  # line -> step index
        self._bound_names: dict[tuple[int, int], str] = {}  # see _bind
        self._lines: list[str] = []
        steps = self.steps
        names: dict[str, Any] = {
            "nd": np.ndarray, "rc": sys.getrefcount, "SOLE": SOLE_OWNER, "sole": sole_view,
            "chk": lambda i, j, v: checks.output(steps[i], j, v),
            "chk1": lambda i, v: checks.called(steps[i], v),
            "chkn": lambda i, r: checks.count(steps[i], r),
            "chkc": lambda i, v: checks.copied(steps[i], v),
            "stop": lambda i, c: checks.cancelled(steps[i], c),
            "getattr": getattr,
        }
        if tracer is not None:
            names["span"] = tracer.span
        for s, value in constants.items():
            names[f"c{s}"] = value

        def ref(s: int) -> str:
            if s < 0:
                return "None"
            return f"c{s}" if s in constants else f"v{s}"

        emit = self._emit
        # a long plan becomes a chain of functions, each of at most STEPS_PER_FUNCTION steps,
        # handing on the values still needed: compiling one function costs memory in
        # proportion to its length (about 17 KB per step), a chain only that of its longest link
        starts = list(range(0, len(steps), STEPS_PER_FUNCTION)) or [0]
        self.holds_blas = blas_limit if len(starts) == 1 else 0
        # slot -> its static shape, where known: constants', and outputs' as steps pass
        sizes = {s: v.shape for s, v in constants.items() if hasattr(v, "shape")}
        if self.holds_blas:
            names.update(hold=run_holder(blas_limit), release=POOLS.exit, HELD=HELD)
        carried = _carried(steps, inputs, outputs, constants, starts) if len(starts) > 1 else []
        self._files: dict[str, int] = {}  # file name of each link -> its first line, less one
        parts = []
        marker = plugin_calls.marker  # under the ep-host command's parent: name each step
        if marker is not None:
            names["MK"] = marker.memory
        for k, start in enumerate(starts):
            first_line = len(self._lines)
            if len(starts) == 1:
                emit("def run(values, cancel):")
            elif k == 0:
                emit("def run0(values, cancel):")
            else:
                emit(f"def run{k}(carry, cancel):")
                if carried[k - 1]:
                    emit("    " + ", ".join(f"v{s}" for s in carried[k - 1]) + ", = carry")
                emit("    carry.clear()")  # the locals now hold the values, the list none
            if k == 0:
                for s in inputs:
                    emit(f"    v{s} = values[{s}]")
            end = starts[k + 1] if k + 1 < len(starts) else len(steps)
            for i in range(start, end):
                step = steps[i]
                args = ", ".join(ref(s) for s in step.inputs)
                indent = "    "
                if cancellable:
                    names[f"n{i}"] = step.subject if step.copy is None else step.name
                    emit(f"{indent}if cancel.terminate: stop({i}, cancel)", i, own=True)
                    emit(f"{indent}cancel.at = n{i}", i, own=True)
                if marker is not None:  # one store: the length byte and the record together
                    record = _marker_record(step)
                    names[f"M{i}"] = bytes((len(record),)) + record
                    emit(f"{indent}MK[0:{len(record) + 1}] = M{i}", i, own=True)
                if tracer is not None:
                    indent = self._emit_span(names, i, step, args, indent)
                release = tuple(releases[i]) if releases else ()
                if step.copy is not None:
                    src, dst = step.copy
                    names[f"down{i}"], names[f"up{i}"] = src.download, dst.upload
                    out = step.outputs[0]
                    emit(f"{indent}v{out} = up{i}(down{i}({args}))", i)
                    if dst.is_host:
                        emit(f"{indent}if v{out}.__class__ is not nd: v{out} = chkc({i}, v{out})",
                             i, own=True)
                else:
                    if self.holds_blas and step.kind == "node" and step.kernel.uses_blas:
                        self._emit_hold(i, step, indent, constants, sizes)
                    self._emit_node(names, i, step, args, release, keep, ref, indent)
                if self.holds_blas:
                    for s, (_, shape, _) in zip(step.outputs, step.expect, strict=False):
                        if s >= 0 and shape is not None and all(type(d) is int for d in shape):
                            sizes[s] = tuple(shape)
                for s in release:
                    if s not in constants:
                        emit(f"    v{s} = None", i)
            handed = outputs if k + 1 == len(starts) else carried[k]
            if marker is not None and k + 1 == len(starts):
                emit("    MK[0] = 0")
            if self.holds_blas:
                emit("    if HELD in values: release(values.pop(HELD))", own=True)
            emit("    return [" + ", ".join(ref(s) for s in handed) + "]")
            filename = (self.filename if len(starts) == 1
                        else f"{self.filename[:-1]} part {k + 1}>")
            self._files[filename] = first_line
            source = "\n".join(self._lines[first_line:]) + "\n"
            exec(compiled_code(source, filename), names)  # noqa: S102 (our own source)
            # taken out of its own globals: a function that held itself would be a cycle
            parts.append(names.pop("run" if len(starts) == 1 else f"run{k}"))
        self._lines.clear()
        self._bound_names.clear()  # ids name objects only while ``names`` holds them
        self._run: Callable[[Mapping[int, Any], Any], list[Any]] = (
            parts[0] if len(parts) == 1 else _chain(parts))

    def __call__(self, values: Mapping[int, Any], cancel: Any = None) -> list[Any]:
        since = sigint.received
        try:
            return self._run(values, cancel)
        except BaseException as exc:  # a kernel's SystemExit is its provider's fault too
            if self.holds_blas and HELD in values:
                POOLS.exit(values.pop(HELD))  # type: ignore[attr-defined]
            if plugin_calls.marker is not None:
                plugin_calls.marker.leave()
            if not isinstance(exc, Exception) and is_user_interrupt(exc, since):
                raise
            line = self._failed_line(exc.__traceback__)
            if line is None or self._own[line - 1] or isinstance(exc, RunCancelledError):
                raise
            raise self.checks.failure(self.steps[self._owner[line - 1]], exc) from exc

    def _emit(self, text: str, step: int = -1, own: bool = False) -> None:
        self._lines.append(text)
        self._owner.append(step)
        self._own.append(own)

    def _bind(self, names: dict[str, Any], prefix: str, value: Any) -> str:
        """The global name of ``value`` in the generated code: one name per object (a kernel
        shared by many steps, a dtype), not one per step."""
        owner, func = getattr(value, "__self__", None), getattr(value, "__func__", None)
        key = (id(owner), id(func)) if owner is not None and func is not None else (id(value), 0)
        name = self._bound_names.get(key)
        if name is None:
            name = self._bound_names[key] = f"{prefix}{len(self._bound_names)}"
            names[name] = value
        return name

    def _emit_hold(self, i: int, step: Step, indent: str, constants: Mapping[int, Any],
                   sizes: Mapping[int, tuple[Any, ...]]) -> None:
        """The test holding the BLAS pools before step ``i`` (see ``blas_limit``): an input or
        known output over ``SINGLE_THREAD_VALUES`` values, read at run time where unknown;
        ``sizes``: the static shapes known so far, by slot."""
        tests, known_big = [], False
        for s in step.inputs:
            shape = sizes.get(s)
            if shape is not None:
                known_big = known_big or element_count(shape) > SINGLE_THREAD_VALUES
            elif s >= 0 and s not in constants:  # a constant without a shape: not an array
                tests.append(f"(v{s}.__class__ is nd and v{s}.size > {SINGLE_THREAD_VALUES})")
        for s, (_, shape, _) in zip(step.outputs, step.expect, strict=False):
            if s >= 0 and shape is not None and all(type(d) is int for d in shape):
                known_big = known_big or element_count(shape) > SINGLE_THREAD_VALUES
        if known_big:
            self._emit(f"{indent}if HELD not in values: hold(values)", i, own=True)
        elif tests:
            self._emit(f"{indent}if HELD not in values and ({' or '.join(tests)}): hold(values)",
                       i, own=True)

    def _emit_span(self, names: dict[str, Any], i: int, step: Step, args: str,
                   indent: str) -> str:
        """Open the step's trace span; returns the indent of the step's body."""
        if step.copy is not None:
            src, dst = step.copy
            names[f"A{i}"] = {"source": src.name, "destination": dst.name}
            names[f"S{i}"] = f"copy {src.name}->{dst.name}"
            self._emit(f"{indent}with span(S{i}, 'copy', bytes=getattr({args}, 'nbytes', 0), "
                       f"**A{i}):", i, own=True)
        else:
            names[f"A{i}"] = dict(step.span)
            names[f"S{i}"] = step.name
            category = "layout" if step.kind == "layout" else "node"
            self._emit(f"{indent}with span(S{i}, {category!r}, **A{i}):", i, own=True)
        return indent + "    "

    def _emit_node(self, names: dict[str, Any], i: int, step: Step, args: str,
                   release: tuple[int, ...], keep: set[int] | frozenset[int],
                   ref: Callable[[int], str], indent: str) -> None:
        """One kernel call and the checks of its outputs: ``Kernel.call`` for a kernel with
        one output (a dead input handed over as ``out=`` where it can take it), else
        ``Kernel.run`` and its sequence of outputs."""
        emit = self._emit
        kernel = step.kernel
        if step.lock is not None:
            names[f"L{i}"] = step.lock
            emit(f"{indent}with L{i}:", i)
            indent += "    "
        scope = ""
        if step.scope:
            scope = "scope={" + ", ".join(f"{n!r}: {ref(s)}" for n, s in step.scope) + "}"
        live = [s for s in step.outputs if s >= 0]
        if step.workspace is not None:
            slot, nbytes = step.workspace
            args = ", ".join(a for a in (args, f"workspace={ref(slot)}"
                                         + (f"[:{nbytes}]" if nbytes else "")) if a)
        if kernel.call is not None and len(step.outputs) == 1 and live and not scope:
            k = self._bind(names, "k", kernel.call)
            out = step.outputs[0]
            donor = _donor(step, release, keep)
            dtype, shape, kind = step.expect[0] if step.expect else (None, None, None)
            if donor is not None and _worth_donating(dtype, shape):
                # the donor must be the output's own dtype and shape, held by nothing else
                t = self._bind(names, "t", np.dtype(dtype))
                v = f"v{donor}"
                emit(f"{indent}d = {v} if {v}.__class__ is nd and {v}.dtype is {t}"
                     f" and {v}.shape == {tuple(shape)!r} and {v}.flags.writeable and"
                     f" ({v}.base is None and rc({v}) == SOLE or sole({v})) else None", i)
                emit(f"{indent}v{out} = {k}({args}, out=d) if d is not None else {k}({args})",
                     i)
                emit(f"{indent}d = None", i)
            else:
                emit(f"{indent}v{out} = {k}({args})", i)
            self._emit_check(names, i, 0, out, (dtype, shape, kind), indent, called=True)
            return
        k = self._bind(names, "k", kernel.run)
        call_args = ", ".join(a for a in (args, scope) if a)
        emit(f"{indent}r = {k}({call_args})", i)
        emit(f"{indent}if (r.__class__ is not tuple and r.__class__ is not list) or len(r) < "
             f"{len(live)}: r = chkn({i}, r)", i, own=True)
        for j, s in enumerate(step.outputs):
            if s < 0:
                continue
            emit(f"{indent}v{s} = r[{j}]", i)
            expect = step.expect[j] if j < len(step.expect) else (None, None, None)
            self._emit_check(names, i, j, s, expect, indent)
        emit(f"{indent}r = None", i)

    def _emit_check(self, names: dict[str, Any], i: int, j: int, s: int,
                    expect: tuple[Any, Any, Any], indent: str, called: bool = False) -> None:
        """The quick test of one output, falling back to the full check when it fails;
        ``called``: the value came from ``Kernel.call``, which may return a tuple."""
        full = f"chk1({i}, v{s})" if called else f"chk({i}, {j}, v{s})"
        dtype, shape, kind = expect
        if not self._check_all and dtype is None and shape is None and kind in (None,
                                                                                ANY_VALUE):
            # nothing known (ZipMap's list of maps, skl2onnx's untyped ArrayFeatureExtractor and
            # ReduceProd): the full check passes an array (and any value a list) as it is
            test = f"v{s}.__class__ is not nd" + (
                f" and v{s}.__class__ is not list" if kind is None else "")
            self._emit(f"{indent}if {test}: v{s} = {full}", i, own=True)
            return
        if self._check_all or kind is not np.ndarray:
            # no quick test but on the host (a sequence, a device's array): the full check
            self._emit(f"{indent}v{s} = {full}", i, own=True)
            return
        test = f"v{s}.__class__ is not nd"
        if dtype is not None:
            test += f" or v{s}.dtype is not {self._bind(names, 't', np.dtype(dtype))}"
        if shape is not None:
            if all(d is not None for d in shape):
                test += f" or v{s}.shape != {tuple(shape)!r}"
            else:
                test += f" or v{s}.ndim != {len(shape)}"
                test += "".join(f" or v{s}.shape[{a}] != {d}"
                                for a, d in enumerate(shape) if d is not None)
        self._emit(f"{indent}if {test}: v{s} = {full}", i, own=True)

    def _failed_line(self, tb: Any) -> int | None:
        """The line of this function that raised, from a traceback (``None``: not ours)."""
        found = None
        files = self._files
        while tb is not None:
            offset = files.get(tb.tb_frame.f_code.co_filename)
            if offset is not None:
                found = offset + tb.tb_lineno
            tb = tb.tb_next
        return found


def _marker_record(step: Step) -> bytes:
    """The marker record naming ``step`` (plugin_calls.HookMarker), cut to fit."""
    if step.copy is not None:
        src, dst = step.copy
        record = marker_head("", f"device copy {src.name} -> {dst.name}") + step.name.encode(
            "utf-8", "replace")
    else:
        record = marker_head(step.provider or "", "run") + step.name.encode("utf-8", "replace")
    return record[:plugin_calls.MARKER_BYTES - 1]


def _carried(steps: Sequence[Step], inputs: Sequence[int], outputs: Sequence[int],
             constants: Mapping[int, Any], starts: Sequence[int]) -> list[list[int]]:
    """Per link of a chain after the first (whose steps begin at ``starts[k]``), the slots
    it takes from the link before: set before it begins and read in it or later."""
    born: dict[int, int] = {s: -1 for s in inputs}  # slot -> the step that sets it
    last: dict[int, int] = {}  # slot -> the last step that reads it
    for i, step in enumerate(steps):
        for s in step.inputs:
            if s >= 0:
                last[s] = i
        if step.workspace is not None:
            last[step.workspace[0]] = i
        for _, s in step.scope:
            last[s] = i
        for s in step.outputs:
            if s >= 0:
                born.setdefault(s, i)
    for s in outputs:
        last[s] = len(steps)
    size = starts[1] - starts[0]
    carried: list[list[int]] = [[] for _ in starts[1:]]
    for s, i in born.items():
        end = last.get(s, -1)
        if s in constants or end <= i:
            continue
        for k in range(max(1, i // size + 1), min(end // size, len(starts) - 1) + 1):
            carried[k - 1].append(s)
    return carried


def _chain(parts: Sequence[Callable[..., list[Any]]]) -> Callable[[Mapping[int, Any], Any],
                                                                  list[Any]]:
    """One run through the links of a long plan, each handed the list the one before returned."""
    first, rest = parts[0], tuple(parts[1:])

    def run(values: Mapping[int, Any], cancel: Any) -> list[Any]:
        carry = first(values, cancel)
        for part in rest:
            carry = part(carry, cancel)
        return carry

    return run


def _donor(step: Step, release: tuple[int, ...], keep: set[int] | frozenset[int]) -> int | None:
    """The input slot the kernel may write its output into: dead after this step, not kept,
    read once by it."""
    for index in step.kernel.inplace:
        if index >= len(step.inputs):
            continue
        s = step.inputs[index]
        if s < 0 or s in keep or s not in release:
            continue
        if step.inputs.count(s) != 1 or any(s == o for _, o in step.scope):
            continue
        return s
    return None


class PlanRun:
    """Runs a :class:`~ep_host.plan.Plan`: its function for plain runs is compiled at creation;
    the one that reads ``RunOptions.terminate`` before every step, on the first run that asks."""

    def __init__(self, plan: Plan, checks: StepChecks, tracer: Tracer | None = None,
                 blas_limit: int = 0):
        self.plan = plan
        self.checks = checks
        self.tracer = tracer
        self.blas_limit = blas_limit
        self._inputs = [*plan.input_slots.values(), *plan.outer_slots.values(), *plan.arenas]
        # per device arena: its slot, device, size and the arenas no run holds now
        self._arenas = [(s, device, nbytes, []) for s, (device, nbytes) in plan.arenas.items()]
        self._outputs = [plan.output_slots[n] for n in plan.output_names]
        self._index = {n: i for i, n in enumerate(plan.output_names)}
        self.plain = self._compile(cancellable=False)
        self._cancellable: CompiledSteps | None = None

    def _compile(self, cancellable: bool) -> CompiledSteps:
        plan = self.plan
        return CompiledSteps(plan.steps, self._inputs, plan.constants, self._outputs, plan.keep,
                             self.checks, releases=plan.releases, tracer=self.tracer,
                             cancellable=cancellable,
                             check_all=self.checks.max_tensor_bytes is not None,
                             blas_limit=self.blas_limit)

    @property
    def holds_blas(self) -> bool:
        """Whether runs hold the BLAS pools themselves, only once a value is big enough
        (``CompiledSteps``'s ``blas_limit``); the caller then does not hold them."""
        return bool(self.plain.holds_blas)

    def run(self, feeds: Mapping[str, Any], scope: Mapping[str, Any] | None = None,
            names: Sequence[str] | None = None, cancel: Any = None) -> list[Any]:
        """Run with inputs by name (already checked) and the outer values the graph reads;
        returns the outputs named in ``names`` (default: all). ``cancel``: a ``RunOptions`` or
        a :class:`RunToken`; a body run inside a cancellable run takes that run's token."""
        plan = self.plan
        values = {plan.input_slots[name]: value for name, value in feeds.items()}
        for name, s in plan.outer_slots.items():
            values[s] = scope[name]  # type: ignore[index]
        if self._arenas:
            for s, device, nbytes, free in self._arenas:  # each run takes arenas of its own
                try:
                    values[s] = free.pop()
                except IndexError:
                    values[s] = device.allocate(nbytes)
            try:
                return self._run(values, names, cancel)
            finally:
                for s, _, _, free in self._arenas:
                    free.append(values[s])
        return self._run(values, names, cancel)

    def _run(self, values: dict[int, Any], names: Sequence[str] | None,
             cancel: Any) -> list[Any]:
        plan = self.plan
        if cancel is None:
            cancel = CURRENT_RUN.get()
        if cancel is None:
            outs = self.plain(values)
        else:
            if cancel.__class__ is not RunToken:
                cancel = RunToken(cancel)
            if cancel.terminate:  # a body with no steps, run once per Loop iteration
                self.checks.cancelled(None, cancel, plan.graph_name)
            if self._cancellable is None:
                self._cancellable = self._compile(cancellable=True)
            entered = CURRENT_RUN.set(cancel)
            try:
                outs = self._cancellable(values, cancel)
            finally:
                CURRENT_RUN.reset(entered)
        if names is None or names is plan.output_names:
            return outs
        return [outs[self._index[n]] for n in names]

"""Weights kept out of the parsed protobuf: a model file's big float initializers are read
straight from the file into one aligned buffer (the file's layout found through a read-only
mapping that touches only the fields' keys), and their arrays are views of it, so the weights
are held once and copied once (protobuf would hold them a second time, in a block freed only
with the whole model). The read goes on on a thread while the model loads; an array waits only
until its own data is in.
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from ep_host.errors import address_space_left

# Smaller initializers stay in the protobuf. Not above loading's INFERENCE_KEEP_BYTES: then
# shape inference runs on the parsed model itself, no copy without the weights (ShuffleNet's 47
# tensors of 1-64 KB made one; its load_model 8.0-8.3 -> 7.1-7.3 ms)
HOLD_MIN_BYTES = 1024
# Smaller files are parsed as they are. Splitting takes protobuf's copy of each weight out of
# session creation: MobileNetV2 (13 MB) 36 -> 28 ms, SqueezeNet (4.7 MB) 11.5 -> 10.8 ms
SPLIT_MIN_FILE_BYTES = 1 * 2**20
# ONNX data type code -> numpy dtype, for the types whose raw data numpy reads as it lies
HELD_TYPES = {1: np.dtype("<f4"), 10: np.dtype("<f2"), 11: np.dtype("<f8")}
ALIGN = 64

# protobuf field numbers: ModelProto.graph, GraphProto.initializer, and TensorProto's fields
MODEL_GRAPH, GRAPH_NODE, GRAPH_INITIALIZER = 7, 1, 5
TENSOR_DATA_TYPE, TENSOR_SEGMENT, TENSOR_NAME, TENSOR_RAW_DATA = 2, 3, 8, 9
TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION = 13, 14
EMPTY_RAW_DATA = bytes([TENSOR_RAW_DATA << 3 | 2, 0])  # the field present, holding b""


class HeldWeights:
    """The buffer and, per main-graph initializer kept in it, its (offset, byte length).
    ``filling``: the read of the weights into the buffer while it goes on, on a thread; an
    array waits for its own data, ``buffer`` for all of it."""

    def __init__(self, buffer: np.ndarray | None, spans: dict[str, tuple[int, int]],
                 filling: _Filling | None = None, origin: _Origin | None = None):
        self._buffer = buffer  # ``None`` until ``filling`` made it
        self.spans = spans
        self.filling = filling
        self.origin = origin  # where the weights are read again after :meth:`release`
        self.released: set[str] = set()
        self._lock = threading.Lock()

    @property
    def buffer(self) -> np.ndarray:
        """The whole buffer, every weight read in."""
        if self.filling is not None:
            self._buffer = self.filling.wait(self.filling.size)
            self.filling = None
        return self._buffer  # type: ignore[return-value]

    def array(self, name: str, data_type: int, dims: list[int]) -> np.ndarray:
        """The initializer's data: a view of the buffer, of its dtype and shape."""
        offset, length = self.spans[name]
        filling = self.filling
        if filling is not None:  # this tensor's data read in is enough
            self._buffer = filling.wait(offset + length)
            if filling.finished:
                self.filling = None
        if name in self.released:
            self._read_again(name)
        dtype = HELD_TYPES[data_type]
        count = 1
        for d in dims:
            count *= d
        if count * dtype.itemsize != length:
            raise ValueError(f"tensor {name!r} of shape {list(dims)} needs "
                             f"{count * dtype.itemsize} bytes of raw data, it holds {length}")
        return np.frombuffer(self._buffer, dtype, count, offset).reshape(dims)

    def release(self, name: str) -> int:
        """Give the memory of ``name``'s data back to the system (the whole pages its span
        covers; a page it shares with a neighbour stays) and return how many bytes that was.
        Only for a buffer nobody else reads (:func:`remember_shared` never held it) and a
        tensor whose every array holder has promised not to read it again: those arrays now
        read zeros. :meth:`array` reads the data from the file again when asked for it later;
        ``0`` (nothing released) where the file is not known or the platform cannot."""
        madvise = _libc_madvise()
        if self.origin is None or madvise is None or name not in self.spans:
            return 0
        buffer = self.buffer
        offset, length = self.spans[name]
        page = mmap.PAGESIZE
        start = buffer.ctypes.data + offset
        first, end = -(-start // page) * page, (start + length) // page * page
        if end <= first:
            return 0
        with self._lock:
            if madvise(first, end - first, MADV_DONTNEED) != 0:
                return 0
            self.released.add(name)
        return end - first

    def _read_again(self, name: str) -> None:
        """Read ``name``'s data, released before, from the model file into its place again;
        ``OSError`` when the file is gone or changed since it was loaded."""
        path, identity, starts = self.origin  # type: ignore[misc]
        offset, length = self.spans[name]
        with self._lock:
            if name not in self.released:
                return
            with open(path, "rb") as f:
                if file_identity(f) != identity:
                    raise OSError(f"{path!r} changed since it was loaded, and the data of "
                                  f"{name!r} was freed after its kernels packed it")
                _read_tensor(f, starts[name], memoryview(self.buffer)[offset:offset + length],
                             name)
            self.released.discard(name)


# the model file's path and identity (see :func:`file_identity`), and where each held tensor's
# raw data starts in it
_Origin = tuple[str, tuple[int, int, int, int], dict[str, int]]
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)


class _Unexpected(Exception):
    """A wire-format feature the split does not handle: the file is parsed as it is."""


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Unexpected
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, value end) of each field."""
    pos = start
    while pos < end:
        first = pos
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, after = _varint(data, pos)
        elif wire == 1:
            after = pos + 8
        elif wire == 5:
            after = pos + 4
        elif wire == 2:
            length, pos = _varint(data, pos)
            after = pos + length
        else:
            raise _Unexpected  # groups: not in ONNX's messages
        if after > end:
            raise _Unexpected
        yield number, wire, first, pos, after
        pos = after


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(number: int, parts: list) -> list:
    size = sum(len(p) for p in parts)
    return [_encode_varint(number << 3 | 2), _encode_varint(size), *parts]


def _split_tensor(data: memoryview, start: int,
                  end: int) -> tuple[str, int, int, int] | None:
    """(name, raw data field start, raw data start, raw data end) when the tensor's data can be
    held outside."""
    name, data_type, raw, count_raw = None, 1, None, 0
    for number, wire, first, value_start, value_end in _fields(data, start, end):
        if number in (TENSOR_SEGMENT, TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION):
            return None
        if number == TENSOR_DATA_TYPE and wire == 0:
            data_type = _varint(data, value_start)[0]
        elif number == TENSOR_NAME and wire == 2:
            name = bytes(data[value_start:value_end]).decode("utf-8", "replace")
        elif number == TENSOR_RAW_DATA and wire == 2:
            raw, count_raw = (first, value_start, value_end), count_raw + 1
    if (name is None or raw is None or count_raw != 1 or data_type not in HELD_TYPES
            or raw[2] - raw[1] < HOLD_MIN_BYTES):
        return None
    return name, *raw


def _skip_run(data: memoryview, pos: int, end: int, key: int, below: float) -> int:
    """Where the run of fields with key byte ``key`` and values shorter than ``below`` bytes
    starting at ``pos`` ends; only their lengths are read, in one tight loop (a graph's 50,000
    nodes and 50,000 small initializers in 40 ms, not the 800 ms of a field at a time through
    :func:`_fields` and :func:`_split_tensor`)."""
    try:
        while pos < end and data[pos] == key:
            at = pos + 1
            length = shift = 0
            while True:
                byte = data[at]
                at += 1
                length |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise _Unexpected
            if length >= below:
                break
            pos = at + length
    except IndexError:
        raise _Unexpected from None
    if pos > end:
        raise _Unexpected
    return pos


NODE_KEY = GRAPH_NODE << 3 | 2  # the key bytes of a graph's node and initializer fields
INITIALIZER_KEY = GRAPH_INITIALIZER << 3 | 2


def _graph_fields(data: memoryview, start: int,
                  end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """As :func:`_fields` over a graph, except that a run of nodes, or of initializers too
    small to hold (what a graph mostly holds, in that order as serialized), comes as one field
    (number 0) spanning them all."""
    pos = start
    while pos < end:
        key = data[pos]
        if key == NODE_KEY or key == INITIALIZER_KEY:
            after = _skip_run(data, pos, end, key,
                              math.inf if key == NODE_KEY else HOLD_MIN_BYTES)
            if after > pos:
                yield 0, 2, pos, pos, after
                pos = after
                continue
        field = next(_fields(data, pos, end))
        yield field
        pos = field[4]


def _plan_split(data: memoryview) -> tuple[list, list[tuple[str, int, int]]] | None:
    """The parts of the serialized model without the raw data of its big float main-graph
    initializers, and those raw data as (name, start, end); reads ``data`` without changing it,
    and only the fields' keys and lengths where it skips raw data."""
    try:
        graphs = [f for f in _fields(data, 0, len(data)) if f[0] == MODEL_GRAPH]
        if len(graphs) != 1 or graphs[0][1] != 2:
            return None
        _, _, graph_field, graph_start, graph_end = graphs[0]
        graph_parts: list = []
        moves: list[tuple[str, int, int]] = []
        for number, wire, first, value_start, value_end in _graph_fields(data, graph_start,
                                                                          graph_end):
            found = (_split_tensor(data, value_start, value_end)
                     if number == GRAPH_INITIALIZER and wire == 2 else None)
            if found is None or any(m[0] == found[0] for m in moves):
                graph_parts.append(data[first:value_end])
                continue
            name, raw_field, raw_start, raw_end = found
            moves.append((name, raw_start, raw_end))
            graph_parts += _length_delimited(GRAPH_INITIALIZER, [
                data[value_start:raw_field], EMPTY_RAW_DATA, data[raw_end:value_end]])
    except _Unexpected:
        return None
    if not moves:
        return None
    return [data[:graph_field], *_length_delimited(MODEL_GRAPH, graph_parts),
            data[graph_end:]], moves


def _spans(moves: list[tuple[str, int, int]]) -> dict[str, tuple[int, int]]:
    """Where each big raw data lies in the held buffer: (offset, length), in file order, each
    at a multiple of ``ALIGN`` bytes."""
    spans = {}
    end = 0
    for name, raw_start, raw_end in moves:
        offset = -(-end // ALIGN) * ALIGN
        spans[name] = (offset, raw_end - raw_start)
        end = offset + raw_end - raw_start
    return spans


def _joined(parts: list) -> bytes:
    return b"".join(bytes(p) if isinstance(p, memoryview) else p for p in parts)


# Held weights of files that sessions sharing prepacked constants loaded, by the file's identity
# (device, inode, size, modification time): another such session of the same file reads only
# the small part and uses the same buffer, so the weights are in memory once. A file rewritten
# in place to the same size and layout within one tick of the file system's clock would be read
# from the old buffer: sharing assumes a model file is not rewritten while a session of it lives.
_SHARED: weakref.WeakValueDictionary[tuple[int, int, int, int], HeldWeights] = (
    weakref.WeakValueDictionary())
_SHARED_LOCK = threading.Lock()


def file_identity(f) -> tuple[int, int, int, int]:
    """The open file's (device, inode, size, modification time in ns)."""
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def remember_shared(key: tuple[int, int, int, int], held: HeldWeights) -> HeldWeights:
    """Hold ``held`` for later loads of the file ``key`` names (while a model uses it); the
    buffer already held for it, if another load got there first."""
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is not None and found.spans == held.spans:
            return found
        _SHARED[key] = held
        return held


def _mapped_plan(f) -> tuple[bytes, list[tuple[str, int, int]]] | None:
    """The small part of the open file ``f`` and where its big float initializers' raw data
    lie, read through a read-only mapping that touches only the pages around the fields' keys;
    ``None`` when the file has none (or a layout this does not follow)."""
    if sys.byteorder != "little" or os.fstat(f.fileno()).st_size == 0:
        return None
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        data = memoryview(mapped)
        try:
            planned = _plan_split(data)
            if planned is None:
                return None
            small, moves = _joined(planned[0]), planned[1]
        finally:
            planned = None  # every view of the mapping goes before it closes
            data.release()
    return small, moves


def read_split(f) -> tuple[bytes, HeldWeights] | None:
    """The small part of the open file ``f`` (each big float main-graph initializer's raw data
    left empty) and those raw data read straight to their aligned places in one buffer: one
    copy of the weights, from the file; ``None`` when the file has none. Where the platform
    reads at an offset (``os.preadv``), weights under :data:`THREAD_MAX_BYTES` are read on a
    thread while the caller goes on (parsing the small part, inferring shapes: ShuffleNet's
    9 MB took 1-3 ms of its creation), and the first array asked for waits for them; bigger
    ones are read here, through the same grouped reads. Under an address-space limit the
    buffer is made here, so that running out of it is the loading stage's error."""
    planned = _mapped_plan(f)
    if planned is None:
        return None
    small, moves = planned
    spans = _spans(moves)
    size = max(offset + length for offset, length in spans.values())
    limited = address_space_left() is not None
    buffer = _weight_buffer(size) if limited or not hasattr(os, "preadv") else None
    name = getattr(f, "name", None)
    origin = (os.path.abspath(name), file_identity(f), {m[0]: m[1] for m in moves}) if (
        isinstance(name, str)) else None
    if hasattr(os, "preadv"):
        return small, HeldWeights(None, spans, _Filling(os.dup(f.fileno()), moves, spans, size,
                                                         buffer, size < THREAD_MAX_BYTES),
                                  origin)
    view = memoryview(buffer)
    for name, raw_start, _ in moves:
        offset, length = spans[name]
        _read_tensor(f, raw_start, view[offset:offset + length], name)
    return small, HeldWeights(buffer, spans, origin=origin)


def _read_tensor(f, start: int, view: memoryview, name: str) -> None:
    """Fill ``view`` from the open file ``f`` at ``start`` (tensor ``name``'s raw data)."""
    f.seek(start)
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise OSError(f"the file ended inside tensor {name!r}")
        got += n


class _Filling:
    """The read of a file's big raw data into the held buffer, on a daemon thread, from its own
    descriptor (``pread``: no shared file offset), in file order: a tensor can be had once the
    read passed it. A process forked meanwhile has no such thread: it reads them itself when
    first asked."""

    def __init__(self, fd: int, moves: list[tuple[str, int, int]],
                 spans: dict[str, tuple[int, int]], size: int, buffer: np.ndarray | None,
                 threaded: bool = True):
        self.fd, self.moves, self.spans, self.size = fd, moves, spans, size
        self.buffer = buffer  # made on the thread when None
        self.pid = os.getpid()
        self.error: BaseException | None = None
        self.filled = -1  # the buffer's bytes in place from its start; -1: no buffer yet
        self.finished = False
        self.progress = threading.Condition()
        self.lock = threading.Lock()
        if not threaded:
            self._fill()
            return
        try:
            threading.Thread(target=self._fill, name="ep-host weights", daemon=True).start()
        except RuntimeError:  # no thread to be had: read here
            self._fill()

    def _advance(self, filled: int) -> None:
        with self.progress:
            self.filled = filled
            self.progress.notify_all()

    def _fill(self) -> None:
        try:
            # a big mapping's pages are made a chunk at a time, just before it is read: made in
            # one call, they would hold the process's memory map for the whole time (ViT-base,
            # 343 MB: 85 ms), and the other thread's allocations would wait on it
            populate = self.buffer is None and self.size >= POPULATE_MIN_BYTES
            if self.buffer is None:
                self.buffer = _weight_buffer(self.size, populate=False)
            buffer = self.buffer
            self._advance(0)
            view = memoryview(buffer)
            scratch = memoryview(bytearray(READ_GAP_BYTES))  # where the gaps' bytes go
            for file_start, parts, first, end in _read_groups(self.moves, self.spans):
                if populate:
                    _populate(buffer, first, end)
                views = [view[offset:offset + length] if offset is not None
                         else scratch[:length] for offset, length in parts]
                _read_fully(self.fd, views, file_start)
                self._advance(end)
        except BaseException as exc:  # handed to whoever asks for an array
            self.error = exc
        finally:
            os.close(self.fd)
            with self.progress:
                self.finished = True
                self.progress.notify_all()

    def wait(self, upto: int) -> np.ndarray:
        """The buffer, once its first ``upto`` bytes are in place; ``OSError`` if the read
        failed (``MemoryError``: the buffer could not be made)."""
        if not self.finished and os.getpid() != self.pid:
            with self.lock:  # forked while the parent's thread read: read them here
                if not self.finished:
                    self.pid = os.getpid()
                    self.progress = threading.Condition()
                    self._fill()
        with self.progress:
            while not self.finished and self.filled < upto:
                self.progress.wait()
        if isinstance(self.error, MemoryError):
            raise MemoryError(f"no memory for the model's weights ({self.size} bytes)")
        if self.error is not None:
            raise OSError(f"cannot read the model's weights: {self.error}") from self.error
        return self.buffer


# Weights from this size are read before loading goes on, not on a thread: measured 20
# creations each in one process, one after another (2-vCPU VM), the thread took the median
# down (DenseNet-121's 32 MB 57 -> 52 ms, MobileNetV2's 14 MB 20 -> 18) but from 100 MB gave a
# long tail, a quarter of the creations 2-6x slower (ResNet-50's 100 MB 45 -> 38 ms median,
# slowest five 59-274 ms against one of 284 read here; DistilBERT's 265 MB 30 creations,
# eight over 150 ms against one; ViT-base 7 over 250 ms against 2): the buffer's pages made
# on one CPU while the other allocates
THREAD_MAX_BYTES = 64 * 2**20
READ_GAP_BYTES = 256 * 1024  # raw data this close in the file are read in one call
READ_MAX_PARTS = 512  # buffers one call reads into, at most


def _read_groups(moves: list[tuple[str, int, int]], spans: dict[str, tuple[int, int]]
                 ) -> Iterator[tuple[int, list[tuple[int | None, int]], int, int]]:
    """The raw data of ``moves`` as few reads as can be: each (file offset, parts, first and
    end buffer offsets), a part (buffer offset, length) or a gap (``None``, length) of the
    file between two raw data; at most ``READ_CHUNK_BYTES`` of data each, a big tensor's over
    several."""
    group: list[tuple[int | None, int]] = []
    start = first = end = 0
    size = 0
    file_end = -1
    for name, raw_start, _ in moves:
        offset, length = spans[name]
        done = 0
        while done < length:
            piece = min(length - done, READ_CHUNK_BYTES)
            gap = raw_start + done - file_end
            if group and (gap > READ_GAP_BYTES or size + piece > READ_CHUNK_BYTES
                          or len(group) >= READ_MAX_PARTS - 1):
                yield start, group, first, end
                group = []
            if not group:
                start, first, size = raw_start + done, offset + done, 0
            elif gap:
                group.append((None, gap))
            group.append((offset + done, piece))
            size += piece
            end = offset + done + piece
            file_end = raw_start + done + piece
            done += piece
    if group:
        yield start, group, first, end


def _read_fully(fd: int, views: list[memoryview], position: int) -> None:
    """Fill ``views`` from the file at ``position`` on, as many calls as the system needs."""
    k = 0
    while k < len(views):
        n = os.preadv(fd, views[k:k + READ_MAX_PARTS], position)
        if not n:
            raise OSError("the file ended inside the weights")
        position += n
        while k < len(views) and n >= len(views[k]):
            n -= len(views[k])
            k += 1
        if n:
            views[k] = views[k][n:]


# From this size the weights go to anonymous private memory whose pages are made in one call
# (Linux), smaller ones to numpy's memory (huge pages where the system gives them). Measured on
# the 2-vCPU VM of bench/models.py, each creation after one of the same model while a session of
# it lives: fresh huge pages are sometimes what the hypervisor hands back most slowly (BERT-base,
# 435 MB: 0.07-1.2 s into a numpy array, 0.15-0.22 s into the mapping; AlexNet, 244 MB: 351-577
# against 98-356 ms creation; RetinaNet, 136 MB: 216-505 against 238-267), while a smaller buffer
# is faster in numpy's (R3D-18, 127 MB: 35 against 60-69 ms; GoogLeNet, 25 MB: 30 against 34)
POPULATE_MIN_BYTES = 128 * 2**20
_WEIGHT_MAP_FLAGS = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
MADV_POPULATE_WRITE = 23  # Linux 5.14 on: make a range's pages, writable, in one call
READ_CHUNK_BYTES = 16 * 2**20  # the read on a thread makes pages and reads this much at a time


def _weight_buffer(size: int, populate: bool = True) -> np.ndarray:
    """A writable uint8 buffer of ``size`` bytes for the weights: from
    :data:`POPULATE_MIN_BYTES` on an anonymous mapping, its pages made in one call
    (``MAP_POPULATE``) unless not ``populate`` (then the caller makes them with
    :func:`_populate`), where the platform has it; numpy's memory otherwise."""
    if hasattr(mmap, "MAP_ANONYMOUS") and size >= POPULATE_MIN_BYTES:
        flags = _WEIGHT_MAP_FLAGS | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        try:
            return np.frombuffer(mmap.mmap(-1, size, flags=flags), np.uint8)
        except (OSError, ValueError):  # no such mapping here: numpy's memory does the same
            pass
    return np.empty(size, np.uint8)


def _populate(buffer: np.ndarray, start: int, end: int) -> None:
    """Make the pages of ``buffer[start:end]`` in one call where Linux can (``madvise``
    through ctypes, which lets other threads run meanwhile); else they are made as written."""
    madvise = _libc_madvise()
    if madvise is not None:
        page = mmap.PAGESIZE
        first = buffer.ctypes.data + start
        aligned = first - first % page
        madvise(aligned, end - start + (first - aligned), MADV_POPULATE_WRITE)


_MADVISE: list[Any] = []


def _libc_madvise() -> Any:
    """libc's ``madvise`` through ctypes, or ``None``."""
    if not _MADVISE:
        found = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                found = ctypes.CDLL("libc.so.6").madvise
                found.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                found.restype = ctypes.c_int
            except (OSError, AttributeError):
                found = None
        _MADVISE.append(found)
    return _MADVISE[0]


def split_shared(f, key: tuple[int, int, int, int]) -> tuple[bytes, HeldWeights] | None:
    """The small part of the open file ``f`` and the held weights a live model loaded from the
    same file; ``None`` when there are none or the file's layout does not match them. Reads
    only the pages around the fields' keys, not the weights."""
    held = _SHARED.get(key)
    if held is None:
        return None
    planned = _mapped_plan(f)
    if planned is None or _spans(planned[1]) != held.spans:
        return None
    return planned[0], held


def return_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). onnx's shape inference frees a copy of the model in many small blocks, about
    1 KB per node, that would otherwise stay resident for the life of the process."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None

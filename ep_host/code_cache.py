"""The compiled code of the functions plans become, kept for the process: another session of the
same model compiles nothing."""

from __future__ import annotations

import threading
import types
from collections import OrderedDict

CODE_CACHE_CHARS = 16 * 2**20
"""The generated sources whose compiled code the process keeps, in characters (least recently
used dropped first): another session of the same model compiles nothing (a plan of 400 steps
takes some 20 ms to compile)."""

_code_cache: OrderedDict[str, types.CodeType] = OrderedDict()
_code_cache_chars = 0
_code_cache_lock = threading.Lock()


def compiled_code(source: str, filename: str) -> types.CodeType:
    """``compile(source, filename, "exec")``, from the process's cache when the same source was
    compiled before (its code objects then renamed to ``filename``)."""
    global _code_cache_chars
    with _code_cache_lock:
        code = _code_cache.get(source)
        if code is not None:
            _code_cache.move_to_end(source)
    if code is None:
        code = compile(source, "<ep-host plan>", "exec")
        if len(source) <= CODE_CACHE_CHARS:
            with _code_cache_lock:
                if source not in _code_cache:
                    _code_cache[source] = code
                    _code_cache_chars += len(source)
                while _code_cache_chars > CODE_CACHE_CHARS:
                    dropped, _ = _code_cache.popitem(last=False)
                    _code_cache_chars -= len(dropped)
    return _renamed(code, filename)


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` and the functions' code in its constants, with ``co_filename`` ``filename``."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)

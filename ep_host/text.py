"""Text from models and providers made safe to print: control characters shown as escapes
(``\\x1b``, ``\\n``, ``\\u202e``) so that no name or reason can drive the terminal or forge a line,
and long text capped with the count of what was left out.
"""

from __future__ import annotations

import unicodedata

REASON_LIMIT = 500  # characters of a reason, name or description shown in a table or JSON

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Directional formatting characters (they reorder what the terminal shows) and line separators.
_BIDI_AND_SEPARATORS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def _escape_char(ch: str) -> str:
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _unsafe(ch: str) -> bool:
    return ch in _BIDI_AND_SEPARATORS or unicodedata.category(ch) == "Cc"


def printable(text: str) -> str:
    """``text`` with every C0/C1 control character, DEL, directional override and line separator
    written as a visible escape."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        _escape_char(ch) if _unsafe(ch) else ch for ch in text)


def capped(text: str, limit: int = REASON_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, ending ``... (N more characters)`` when cut."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def shown(text: object, limit: int = REASON_LIMIT) -> str:
    """``text`` capped and escaped: the form every provider- or model-supplied string takes on a
    terminal."""
    return printable(capped(str(text), limit))


def message(text: object, line_limit: int = 2 * REASON_LIMIT, max_lines: int = 200) -> str:
    """A multi-line message (an error, a warning) safe to print: each line capped and escaped,
    at most ``max_lines`` lines."""
    lines = str(text).split("\n")
    out = [shown(line, line_limit) for line in lines[:max_lines]]
    if len(lines) > max_lines:
        out.append(f"... ({len(lines) - max_lines} more lines)")
    return "\n".join(out)

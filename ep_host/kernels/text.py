"""String ops: StringNormalizer, StringSplit, StringConcat, RegexFullMatch, TfIdfVectorizer;
and ImageDecoder, which decodes with Pillow when it is installed and declines otherwise.

Strings are numpy object arrays of ``str`` (``bytes`` elements are read as UTF-8); they are
processed in plain Python. Case changes follow Python's ``str.upper``/``str.lower`` (the spec
leaves them to the locale; for ASCII every implementation agrees). RegexFullMatch runs RE2
patterns on Python's ``re`` after translating the constructs whose meaning differs, and
declines the RE2 syntax that ``re`` lacks or reads differently.
"""

from __future__ import annotations

import importlib.util
import re

from ep_host import deny, require
from ep_host.kernels.helpers import as_text, object_array
from ep_host.kernels.registry import kernel

STRING = frozenset({"string"})


# ---------------------------------------------------------------------------------------------
# StringNormalizer, StringConcat, StringSplit
# ---------------------------------------------------------------------------------------------


LOCALES = ("", "en_US", "en_US.UTF-8", "en_US.utf8", "C", "C.UTF-8", "POSIX")


def _check_normalizer(node, provider):
    attrs = node.attributes
    action = attrs.get("case_change_action", "NONE")
    require(action in ("NONE", "LOWER", "UPPER"), "StringNormalizer: case_change_action must be "
            "NONE, LOWER or UPPER, got {!r}", action, code="attribute")
    locale = attrs.get("locale", "")
    require(locale in LOCALES, "StringNormalizer: {} changes case as en_US does; locale {!r} "
            "may differ (accepted: {})", provider, locale, ", ".join(repr(v) for v in LOCALES),
            code="attribute")
    shape = node.inputs[0].shape if node.inputs[0] is not None else None
    if shape is not None:
        first = shape[0] if shape else None
        require(len(shape) == 1 or (len(shape) == 2 and not isinstance(first, int))
                or (len(shape) == 2 and first == 1),
                "StringNormalizer: the input must be [C] or [1, C], got shape {}", shape,
                code="shape")


@kernel("StringNormalizer", 10, dtypes=STRING, check=_check_normalizer)
def string_normalizer(xp, x, *, case_change_action, is_case_sensitive, locale=None,
                      stopwords=()):
    if x.ndim == 2 and x.shape[0] != 1 or x.ndim not in (1, 2):
        raise ValueError(f"StringNormalizer takes [C] or [1, C], got {x.shape}")
    words = [as_text(s) for s in x.reshape(-1)]
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            words = [w for w in words if w not in stop]
        else:
            stop = {s.lower() for s in stopwords}
            words = [w for w in words if w.lower() not in stop]
    if case_change_action == "LOWER":
        words = [w.lower() for w in words]
    elif case_change_action == "UPPER":
        words = [w.upper() for w in words]
    if not words:
        words = [""]
    return object_array(xp, words, (len(words),) if x.ndim == 1 else (1, len(words)))


@kernel("StringConcat", 20, dtypes=STRING)
def string_concat(xp, x, y):
    a, b = xp.broadcast_arrays(x, y)
    joined = [as_text(p) + as_text(q) for p, q in zip(a.reshape(-1), b.reshape(-1), strict=True)]
    return object_array(xp, joined, a.shape)


_SPACE = " \t\n\v\f\r"
_SPACES = re.compile(f"[{re.escape(_SPACE)}]+")


def _split(s: str, delimiter: str | None, maxsplit: int) -> list[str]:
    if delimiter:
        return s.split(delimiter, maxsplit)
    s = s.strip(_SPACE)
    if not s:
        return []
    return [s] if maxsplit == 0 else _SPACES.split(s, maxsplit=max(maxsplit, 0))


@kernel("StringSplit", 20, dtypes=STRING)
def string_split(xp, x, *, delimiter=None, maxsplit=None):
    """Without a delimiter, runs of ASCII whitespace (space, tab, newline, vertical tab, form
    feed, carriage return) separate; leading and trailing whitespace is dropped."""
    limit = -1 if maxsplit is None else maxsplit
    parts = [_split(as_text(s), delimiter, limit) for s in x.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    flat = [q for p in parts for q in p + [""] * (width - len(p))]
    counts = xp.asarray([len(p) for p in parts], dtype=xp.int64).reshape(x.shape)
    return object_array(xp, flat, tuple(x.shape) + (width,)), counts


# ---------------------------------------------------------------------------------------------
# RegexFullMatch: RE2 syntax on Python's re
# ---------------------------------------------------------------------------------------------


class Untranslatable(ValueError):
    pass


_CLASS_ESCAPES = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
_LITERAL_ESCAPES = set("tnrfva") | set("\\.+*?()|[]{}^$-/#&~ \"'!%,:;<=>@`")


def translate_re2(pattern: str) -> tuple[str, int]:
    """``pattern`` (RE2 syntax) as a Python ``re`` pattern with the same full-match meaning, and
    its flags; raises :class:`Untranslatable` for what re lacks or reads differently."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    case_insensitive = multiline = False
    uses_boundary = False
    depth = 0

    def escape(j: int) -> tuple[str, int]:
        """The translation of the escape at ``pattern[j] == '\\'`` and the next index."""
        nonlocal uses_boundary
        if j + 1 >= n:
            raise Untranslatable("the pattern ends with a lone backslash")
        c = pattern[j + 1]
        if c in _CLASS_ESCAPES:
            body = _CLASS_ESCAPES[c]
            return (body if in_class else f"[{body}]"), j + 2
        if c.lower() in _CLASS_ESCAPES:
            if in_class:
                raise Untranslatable(f"negated class \\{c} inside a character class")
            return f"[^{_CLASS_ESCAPES[c.lower()]}]", j + 2
        if c in "bB":
            if in_class:
                raise Untranslatable(f"\\{c} inside a character class")
            uses_boundary = True
            return "\\" + c, j + 2
        if c == "A" and not in_class:
            return "\\A", j + 2
        if c == "z" and not in_class:
            return "\\Z", j + 2
        if c == "x":
            if j + 2 < n and pattern[j + 2] == "{":
                end = pattern.find("}", j + 3)
                digits = pattern[j + 3:end] if end > 0 else ""
                if not digits or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    raise Untranslatable("a malformed \\x{...} escape")
                code = int(digits, 16)
                if code > 0x10FFFF:
                    raise Untranslatable(f"\\x{{{digits}}} is beyond Unicode")
                return f"\\U{code:08x}", end + 1
            hexa = pattern[j + 2:j + 4]
            if len(hexa) == 2 and all(d in "0123456789abcdefABCDEF" for d in hexa):
                return "\\x" + hexa, j + 4
            raise Untranslatable("a malformed \\x escape")
        if c in _LITERAL_ESCAPES:
            return "\\" + c, j + 2
        raise Untranslatable(f"the escape \\{c} (octal, backreference, Unicode class, \\Q..\\E,"
                             f" \\C or another escape that re reads differently)")

    while i < n:
        c = pattern[i]
        if c == "\\":
            piece, i = escape(i)
            out.append(piece)
            continue
        if in_class:
            if c == "[" and i + 1 < n and pattern[i + 1] in ":=.":
                raise Untranslatable("POSIX character classes ([[:alpha:]])")
            if c == "[":
                out.append("\\[")
            elif c == "]" and out[-1] not in ("[", "[^"):
                in_class = False
                out.append("]")
            else:
                out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if i < n and pattern[i] == "]":  # a leading ']' is a literal
                out.append("\\]")
                i += 1
            continue
        if c == "(":
            depth += 1
            if pattern.startswith("(?", i):
                rest = pattern[i + 2:]
                if rest.startswith("P<") or rest.startswith(":"):
                    out.append("(?")
                    i += 2
                    continue
                if rest.startswith("<") and not rest.startswith(("<=", "<!")):
                    out.append("(?P")
                    i += 2
                    continue
                m = re.match(r"([imsU]*)(?:-([imsU]*))?([:)])", rest)
                if not m:
                    raise Untranslatable("lookaround, backreference, conditional or comment "
                                         "groups, which RE2 does not have")
                on, off, end = m.group(1), m.group(2) or "", m.group(3)
                if "U" in on + off:
                    raise Untranslatable("the U (ungreedy) flag")
                if end == ")":
                    if i != 0 or off:
                        raise Untranslatable("flags set in the middle of a pattern")
                    case_insensitive |= "i" in on
                    multiline |= "m" in on
                    depth -= 1
                elif "m" in on + off:
                    raise Untranslatable("the m flag inside a group")
                elif "i" in on:
                    case_insensitive = True
                out.append("(?" + m.group(0))
                i += 2 + len(m.group(0))
                continue
            out.append("(")
            i += 1
            continue
        if c == ")":
            depth -= 1
        if c in "*+?}" and i + 1 < n and pattern[i + 1] == "+":
            raise Untranslatable("possessive repetition")
        if c == "{":
            m = re.match(r"\{(\d*)(,?)(\d*)\}", pattern[i:])
            if m and not m.group(1):  # RE2 reads {,n} and {} as literals
                out.append("\\{")
                i += 1
                continue
            if m and max(int(m.group(1) or 0), int(m.group(3) or 0)) > 1000:
                raise Untranslatable("a repetition count above 1000 (RE2's limit)")
            if not m:
                out.append("\\{")
                i += 1
                continue
        if c == "$" and not multiline:
            out.append("\\Z")
            i += 1
            continue
        out.append(c)
        i += 1
    if in_class:
        raise Untranslatable("an unterminated character class")
    if depth != 0:
        raise Untranslatable("unbalanced parentheses")
    if case_insensitive and uses_boundary:
        raise Untranslatable("\\b or \\B with case-insensitive matching")
    flags = 0 if case_insensitive else re.ASCII
    translated = "".join(out)
    re.compile(translated, flags)
    return translated, flags


def _check_regex(node, provider):
    pattern = node.attributes.get("pattern")
    require(pattern is not None, "RegexFullMatch: the pattern attribute is required",
            code="attribute")
    try:
        translate_re2(pattern)
    except Untranslatable as exc:
        deny("RegexFullMatch: {} runs RE2 patterns on Python's re and cannot match {} "
             "exactly (pattern {!r})", provider, exc, pattern, code="attribute")
    except re.error as exc:
        deny("RegexFullMatch: pattern {!r} does not compile: {}", pattern, exc, code="attribute")


def _compiled(node):
    translated, flags = translate_re2(node.attributes["pattern"])
    return {"compiled": re.compile(translated, flags)}


@kernel("RegexFullMatch", 20, dtypes=STRING, check=_check_regex, bind=_compiled)
def regex_full_match(xp, x, *, pattern=None, compiled=None):
    matches = [compiled.fullmatch(as_text(s)) is not None for s in x.reshape(-1)]
    return xp.asarray(matches, dtype=bool).reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# TfIdfVectorizer
# ---------------------------------------------------------------------------------------------


def _check_tfidf(node, provider):
    attrs = node.attributes
    mode = attrs.get("mode")
    require(mode in ("TF", "IDF", "TFIDF"), "TfIdfVectorizer: mode must be TF, IDF or TFIDF, "
            "got {!r}", mode, code="attribute")
    ints, strings = attrs.get("pool_int64s"), attrs.get("pool_strings")
    require((ints is None) != (strings is None), "TfIdfVectorizer: exactly one of pool_int64s "
            "and pool_strings must be set", code="attribute")
    x = node.inputs[0]
    if x is not None and x.dtype is not None:
        want = "string" if strings is not None else "int32/int64"
        require((x.dtype.name == "string") == (strings is not None),
                "TfIdfVectorizer: the pool needs {} input, got {}", want, x.dtype.name,
                code="dtype")
    if x is not None and x.shape is not None:
        require(len(x.shape) in (1, 2), "TfIdfVectorizer: the input must be [C] or [N, C], got "
                "shape {}", x.shape, code="shape")
    lo, hi = attrs.get("min_gram_length", 0), attrs.get("max_gram_length", 0)
    require(1 <= lo <= hi, "TfIdfVectorizer: needs 1 <= min_gram_length <= max_gram_length, got "
            "{} and {}", lo, hi, code="attribute")
    require(attrs.get("max_skip_count", 0) >= 0, "TfIdfVectorizer: max_skip_count must be >= 0",
            code="attribute")
    pool = ints if ints is not None else strings
    counts, indexes = attrs.get("ngram_counts", ()), attrs.get("ngram_indexes", ())
    try:
        _pool_table(pool, counts, indexes, attrs.get("weights"))
    except ValueError as exc:
        deny("TfIdfVectorizer: {}", exc, code="attribute")


def _pool_table(pool, counts, indexes, weights):
    """{n-gram tuple: (output coordinate, weight)} from the CSR-like pool attributes."""
    table = {}
    k = 0
    for level, start in enumerate(counts):
        n = level + 1
        end = counts[level + 1] if level + 1 < len(counts) else len(pool)
        if end < start or (end - start) % n:
            raise ValueError(f"the {n}-gram slice [{start}, {end}) of the pool does not hold "
                             f"whole {n}-grams")
        for j in range(start, end, n):
            if k >= len(indexes):
                raise ValueError("ngram_indexes has fewer entries than the pool has n-grams")
            w = 1.0 if not weights else weights[k]
            table[tuple(pool[j:j + n])] = (indexes[k], w)
            k += 1
    if k != len(indexes):
        raise ValueError(f"the pool holds {k} n-grams, ngram_indexes has {len(indexes)}")
    if weights and len(weights) != k:
        raise ValueError(f"weights has {len(weights)} entries for {k} n-grams")
    return table


@kernel("TfIdfVectorizer", 9, dtypes={"int32", "int64", "string"}, check=_check_tfidf)
def tfidf_vectorizer(xp, x, *, max_gram_length, max_skip_count, min_gram_length, mode,
                     ngram_counts, ngram_indexes, pool_int64s=None, pool_strings=None,
                     weights=None):
    """Every n-gram with n in [min, max] and a gap of 0..max_skip_count items between its
    members is counted (a 1-gram once per position, whatever the skips)."""
    is_text = pool_strings is not None
    table = _pool_table(pool_strings if is_text else pool_int64s, ngram_counts, ngram_indexes,
                        weights)
    width = max(ngram_indexes) + 1 if ngram_indexes else 0
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    out = xp.zeros((rows.shape[0], width), dtype=xp.float32)
    for r in range(rows.shape[0]):
        tokens = [as_text(t) if is_text else int(t) for t in rows[r].tolist()]
        counts: dict[int, int] = {}
        for n in range(min_gram_length, max_gram_length + 1):
            for gap in range(max_skip_count + 1 if n > 1 else 1):
                step = gap + 1
                for start in range(len(tokens) - (n - 1) * step):
                    hit = table.get(tuple(tokens[start:start + (n - 1) * step + 1:step]))
                    if hit is not None:
                        counts[hit[0]] = counts.get(hit[0], 0) + 1
        weight_of = {index: w for index, w in table.values()}
        for index, count in counts.items():
            if mode == "TF":
                out[r, index] = count
            elif mode == "IDF":
                out[r, index] = weight_of[index]
            else:
                out[r, index] = count * weight_of[index]
    return out.reshape(width) if x.ndim == 1 else out


# ---------------------------------------------------------------------------------------------
# ImageDecoder
# ---------------------------------------------------------------------------------------------


PIXEL_FORMATS = {"RGB": ("RGB", 3), "BGR": ("RGB", 3), "Grayscale": ("L", 1)}


def _check_image_decoder(node, provider):
    require(importlib.util.find_spec("PIL") is not None,
            "ImageDecoder: {} decodes images with Pillow, which is not installed (pip install "
            "pillow to decode BMP, JPEG, JPEG 2000, TIFF, PNG, WebP and PNM)", provider, code="op")
    pixel_format = node.attributes.get("pixel_format", "RGB")
    require(pixel_format in PIXEL_FORMATS, "ImageDecoder: pixel_format must be RGB, BGR or "
            "Grayscale, got {!r}", pixel_format, code="attribute")


@kernel("ImageDecoder", 20, dtypes={"uint8"}, check=_check_image_decoder)
def image_decoder(xp, encoded, *, pixel_format):
    """Pillow's decoders (libjpeg-turbo's fancy upsampling for JPEG, as the spec asks); Grayscale
    is Pillow's RGB-to-L conversion. Data that does not decode gives an empty [0, 0, C]."""
    import io

    from PIL import Image, UnidentifiedImageError

    mode, channels = PIXEL_FORMATS[pixel_format]
    try:
        with Image.open(io.BytesIO(encoded.tobytes())) as image:
            pixels = xp.asarray(image.convert(mode), dtype=xp.uint8)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return xp.zeros((0, 0, channels), dtype=xp.uint8)
    pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], channels)
    return pixels[:, :, ::-1] if pixel_format == "BGR" else pixels

"""Classical machine learning ops of the ``ai.onnx.ml`` domain: the look-ups (LabelEncoder,
CategoryMapper), the feature ops and LinearRegressor, and the post transforms they share with
the tree ensembles (``trees.py``).

Look-ups run in plain Python over the flattened input (strings are numpy object arrays);
arithmetic uses ``xp``.
"""

from __future__ import annotations

import math

import numpy as np

import ep_host
from ep_host import require
from ep_host.kernels.helpers import as_text, index_bounds, object_array
from ep_host.kernels.registry import kernel

ML = "ai.onnx.ml"
NUMBERS = frozenset({"float32", "float64", "int64", "int32"})
FLOAT32 = np.dtype(np.float32)  # native float32: an array's dtype is this very object


def input_type(node, i=0):
    v = node.inputs[i] if i < len(node.inputs) else None
    return None if v is None or v.dtype is None else v.dtype.name


# ---------------------------------------------------------------------------------------------
# Post transforms
# ---------------------------------------------------------------------------------------------

TRANSFORM_NAMES = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3, "PROBIT": 4}


# A row of fewer scores than this is transformed in Python floats when it is the only row: the
# same float64 operations in the same order as numpy's (which adds fewer than 8 values one by
# one), at a fraction of the cost of numpy's calls on tiny arrays.
SHORT_ROW = 8
# fewer scores than this take LOGISTIC one by one in Python: 7 of them 3 us against numpy's 9
SHORT_SCORES = 32


def given_array(node, name):
    """Attribute ``name`` of numbers as a flat read-only array (``NodeView.attribute_array``:
    no Python object per number), empty where the node does not set it."""
    values = node.attribute_array(name)
    return np.zeros(0, np.int64) if values is None else values.reshape(-1)


def transform_scores(xp, scores, kind):
    """Scores [rows, k] (float64) through a post transform, by its number in TRANSFORM_NAMES.

    SOFTMAX_ZERO is a softmax in which zero scores stay zero; a row of zeros has none and
    gives NaN (onnxruntime's answer; the spec does not define it). PROBIT is the inverse of the
    standard normal distribution function, computed exactly (onnxruntime approximates it to
    about 1e-3)."""
    if (kind in (1, 2) and scores.__class__ is np.ndarray and scores.shape[0] == 1
            and scores.shape[1] < SHORT_ROW):
        row = scores[0].tolist()
        if math.isfinite(sum(row)):  # NaN and infinities take numpy's path
            return np.array([_softmax_row(row) if kind == 1 else logistic_row(row)])
    if kind == 2 and scores.__class__ is np.ndarray and scores.size < SHORT_SCORES:
        # a few scores (a binary classifier's column): one by one, as a row above
        values = scores.ravel().tolist()
        if math.isfinite(sum(values)):
            return np.array(logistic_row(values), dtype=scores.dtype).reshape(scores.shape)
    if kind == 1:  # SOFTMAX
        e = xp.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind == 2:  # LOGISTIC
        e = xp.exp(-xp.abs(scores))
        return xp.where(scores >= 0, 1 / (1 + e), e / (1 + e))
    if kind == 3:  # SOFTMAX_ZERO
        if scores.shape[1] == 0:
            return scores
        e = xp.where(scores != 0, xp.exp(scores - scores.max(axis=1, keepdims=True)), 0.0)
        total = e.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return e / total
    if kind == 4:  # PROBIT
        from scipy.special import ndtri

        return xp.asarray(ndtri(scores))
    return scores


def _softmax_row(row):
    top = max(row)
    e = [math.exp(v - top) for v in row]
    total = sum(e)
    return [v / total for v in e]


def logistic_row(row):
    """LOGISTIC of each float in ``row`` (a list), in float64 as numpy's path computes it."""
    out = []
    for v in row:
        e = math.exp(-abs(v))
        out.append(1 / (1 + e) if v >= 0 else e / (1 + e))
    return out


# ---------------------------------------------------------------------------------------------
# LabelEncoder, CategoryMapper
# ---------------------------------------------------------------------------------------------


def _lookup(xp, x, keys, values, default, out_dtype, key_of):
    table = {}
    for k, v in zip(keys, values, strict=True):
        table[key_of(k)] = v  # a repeated key: the last one wins
    mapped = [table.get(key_of(k), default) for k in x.reshape(-1).tolist()]
    if out_dtype is object:
        return object_array(xp, [as_text(v) for v in mapped], x.shape)
    return xp.asarray(mapped, dtype=out_dtype).reshape(x.shape)


def _check_label_encoder_1(node, provider):
    t = input_type(node)
    require(t in (None, "string", "int64"), "LabelEncoder: version 1 maps string <-> int64, got "
            "{} input", t, code="dtype")
    _require_unique(node, "classes_strings", node.attributes.get("classes_strings") or ())


def _require_unique(node, name, keys):
    """Before version 4 the spec does not say which of repeated keys wins (onnxruntime takes
    the first, onnx's reference the last)."""
    seen, repeated = set(), []
    for k in keys:
        k = "nan" if isinstance(k, float) and math.isnan(k) else k
        if k in seen:
            repeated.append(k)
        seen.add(k)
    require(not repeated, "{}-{}: {} repeats {}; the spec does not say which entry wins",
            node.op_type, node.since_version, name, repeated[:3], code="attribute")


@kernel("LabelEncoder", 1, domain=ML, dtypes={"string", "int64"}, check=_check_label_encoder_1)
def label_encoder_1(xp, x, *, default_int64, default_string, classes_strings=()):
    """String input maps to its index in classes_strings; int64 input maps to the class at
    that index."""
    classes = list(classes_strings)
    if x.dtype == object:
        index = {c: i for i, c in enumerate(classes)}
        out = [index.get(as_text(s), default_int64) for s in x.reshape(-1).tolist()]
        return xp.asarray(out, dtype=xp.int64).reshape(x.shape)
    out = [classes[i] if 0 <= i < len(classes) else default_string
           for i in x.reshape(-1).tolist()]
    return object_array(xp, out, x.shape)


_KEY_TYPES2 = {"keys_strings": "string", "keys_int64s": "int64", "keys_floats": "float32"}
_VALUE_TYPES2 = {"values_strings": "string", "values_int64s": "int64", "values_floats": "float32"}


def _one_of(node, names, what):
    given = [n for n in names if node.attributes.get(n) is not None]
    require(len(given) == 1, "LabelEncoder: exactly one of {} must be set, got {}", what,
            given or "none", code="attribute")
    return given[0]


def tensor_type(array) -> str:
    return ep_host.dtype(array.dtype).name


def _label_encoder_types(node):
    keys = _one_of(node, [*_KEY_TYPES2, "keys_tensor"], "keys_*")
    values = _one_of(node, [*_VALUE_TYPES2, "values_tensor"], "values_*")
    attrs = node.attributes
    key_type = _KEY_TYPES2.get(keys) or tensor_type(attrs["keys_tensor"])
    value_type = _VALUE_TYPES2.get(values) or tensor_type(attrs["values_tensor"])
    return keys, values, key_type, value_type


def _check_label_encoder(node, provider):
    keys, values, key_type, value_type = _label_encoder_types(node)
    attrs = node.attributes
    n_keys, n_values = len(attrs[keys]), len(attrs[values])
    require(n_keys == n_values, "LabelEncoder: {} has {} entries, {} has {}", keys, n_keys,
            values, n_values, code="attribute")
    if node.since_version < 4:
        _require_unique(node, keys, attrs[keys])
    t = input_type(node)
    require(t is None or t == key_type, "LabelEncoder: the input must have the keys' type {}, "
            "got {}", key_type, t, code="dtype")
    allowed = {"string", "int64", "float32", "int32", "int16", "float64"}
    if node.since_version < 4:
        allowed = {"string", "int64", "float32"}
    require(key_type in allowed and value_type in allowed, "LabelEncoder-{} maps {} keys and "
            "values, got {} -> {}", node.since_version, "/".join(sorted(allowed)), key_type,
            value_type, code="dtype")
    default = attrs.get("default_tensor")
    if default is not None:
        require(default.size == 1 and tensor_type(default) == value_type,
                "LabelEncoder: default_tensor must hold one {} value, got {} of {}", value_type,
                default.size, tensor_type(default), code="attribute")


def _numpy_type(name):
    return object if name == "string" else ep_host.dtype(name).numpy


def _label_encoder(xp, x, attrs, nan_matches_nan):
    keys = next(attrs[k] for k in (*_KEY_TYPES2, "keys_tensor") if attrs.get(k) is not None)
    values = next(attrs[k] for k in (*_VALUE_TYPES2, "values_tensor")
                  if attrs.get(k) is not None)
    value_names = [k for k in (*_VALUE_TYPES2, "values_tensor") if attrs.get(k) is not None]
    if value_names[0] == "values_tensor":
        value_type = tensor_type(values)
        values = values.tolist()
    else:
        value_type = _VALUE_TYPES2[value_names[0]]
    keys = keys.tolist() if hasattr(keys, "tolist") else list(keys)
    if attrs.get("default_tensor") is not None:
        default = attrs["default_tensor"].reshape(-1).tolist()[0]
    elif value_type == "string":
        default = attrs["default_string"]
    elif value_type in ("float32", "float64"):
        default = attrs["default_float"]
    else:
        default = attrs["default_int64"]
    if x.dtype == object:
        key_of = as_text
    elif x.dtype.kind == "f":
        if nan_matches_nan:
            def key_of(v):
                return "nan" if math.isnan(v) else float(v) + 0.0
        else:
            width = x.dtype.type

            def key_of(v):
                return width(v).tobytes()
    else:
        key_of = int
    return _lookup(xp, x, keys, values, default, _numpy_type(value_type), key_of)


def _label_encoder_kernel(nan_matches_nan):
    def label_encoder(xp, x, *, default_float=None, default_int64=None, default_string=None,
                      default_tensor=None, keys_floats=None, keys_int64s=None, keys_strings=None,
                      keys_tensor=None, values_floats=None, values_int64s=None,
                      values_strings=None, values_tensor=None):
        attrs = {k: v for k, v in locals().items() if k not in ("xp", "x")}
        return _label_encoder(xp, x, attrs, nan_matches_nan)

    return label_encoder


# Version 2 compares float keys bit by bit; version 4 matches NaN with any NaN and 0 with -0.
kernel("LabelEncoder", 2, domain=ML, dtypes=None, check=_check_label_encoder)(
    _label_encoder_kernel(nan_matches_nan=False))
kernel("LabelEncoder", 4, domain=ML, dtypes=None, check=_check_label_encoder)(
    _label_encoder_kernel(nan_matches_nan=True))


def _check_category_mapper(node, provider):
    attrs = node.attributes
    ints, strings = attrs.get("cats_int64s") or (), attrs.get("cats_strings") or ()
    require(len(ints) == len(strings), "CategoryMapper: cats_int64s ({}) and cats_strings ({}) "
            "must have the same length", len(ints), len(strings), code="attribute")
    _require_unique(node, "cats_int64s", ints)
    _require_unique(node, "cats_strings", strings)


@kernel("CategoryMapper", 1, domain=ML, dtypes={"string", "int64"}, check=_check_category_mapper)
def category_mapper(xp, x, *, default_int64, default_string, cats_int64s=(), cats_strings=()):
    if x.dtype == object:
        return _lookup(xp, x, cats_strings, cats_int64s, default_int64, xp.int64, as_text)
    return _lookup(xp, x, cats_int64s, cats_strings, default_string, object, int)


# ---------------------------------------------------------------------------------------------
# Elementwise and feature ops
# ---------------------------------------------------------------------------------------------


def _feature_indices(xp, y):
    """ArrayFeatureExtractor's indices as int64 (int64 ones as they are), with their smallest
    and largest value."""
    index = y.reshape(-1).astype(xp.int64, copy=False)
    if not index.size:
        return index, 0, -1
    return (index, *index_bounds(xp, index))


def _prepare_feature_indices(xp, constants, **_):
    """Constant indices worked out once; one ascending run of them (the common single index
    among them) is read as a slice, a view of the input."""
    y = constants.get(1)
    if y is None:
        return {}
    index, low, high = _feature_indices(xp, y)
    run = index.size and index.tolist() == list(range(low, high + 1))
    return {"indices": (index, low, high), "run": slice(low, high + 1) if run else None}


@kernel("ArrayFeatureExtractor", 1, domain=ML, dtypes=NUMBERS | {"string"},
        prepare=_prepare_feature_indices)
def array_feature_extractor(xp, x, y, *, indices=None, run=None):
    """``indices``: constant indices with their bounds, worked out once; ``run``: the slice
    they make when they are one ascending run."""
    index, low, high = indices if indices is not None else _feature_indices(xp, y)
    if index.size and (low < 0 or high >= x.shape[-1]):
        raise IndexError(f"indices {index.tolist()} out of range for a last axis of "
                         f"{x.shape[-1]}")
    out = x.take(index, axis=-1) if run is None else x[..., run]
    return out.reshape(1, -1) if x.ndim == 1 else out


@kernel("Binarizer", 1, domain=ML, dtypes=NUMBERS)
def binarizer(xp, x, *, threshold):
    return (x > threshold).astype(x.dtype)


def _feature_params(values, features, what):
    if len(values) not in (1, features):
        raise ValueError(f"{what} needs 1 or {features} values, got {len(values)}")
    return values


def _scaler_params(node):
    attrs = node.attributes
    return {"params": (np.asarray(attrs.get("offset") or (0.0,), np.float32),
                       np.asarray(attrs.get("scale") or (1.0,), np.float32))}


@kernel("Scaler", 1, domain=ML, dtypes=NUMBERS, bind=_scaler_params)
def scaler(xp, x, *, offset=(), scale=(), params=None):
    features = x.shape[-1] if x.ndim else 1
    off, sc = params
    if len(off) not in (1, features) or len(sc) not in (1, features):
        _feature_params(off, features, "offset")
        _feature_params(sc, features, "scale")
    if x.ndim == 2 and x.dtype is FLOAT32 and x.flags.c_contiguous:
        scale_rows = getattr(xp, "compiled_scaler", None)  # a provider's one pass (numba)
        if scale_rows is not None and x.size <= scale_rows.MAX_SIZE and scale_rows.ready():
            return scale_rows(x, off, sc)
    y = xp.subtract(x, xp.asarray(off), dtype=xp.float32)  # x read as float32: a new array
    y *= xp.asarray(sc)
    return y


def _check_imputer(node, provider):
    attrs = node.attributes
    t = input_type(node)
    floats, ints = attrs.get("imputed_value_floats"), attrs.get("imputed_value_int64s")
    require((floats is None) != (ints is None), "Imputer: exactly one of imputed_value_floats "
            "and imputed_value_int64s must be set", code="attribute")
    if t is not None:
        want_floats = t in ("float32", "float64")
        require(want_floats == (floats is not None), "Imputer: {} input takes imputed_value_{}",
                t, "floats" if want_floats else "int64s", code="attribute")


@kernel("Imputer", 1, domain=ML, dtypes=NUMBERS, check=_check_imputer)
def imputer(xp, x, *, replaced_value_float, replaced_value_int64, imputed_value_floats=None,
            imputed_value_int64s=None):
    """A NaN replaced_value_float replaces NaN inputs."""
    features = x.shape[-1] if x.ndim else 1
    if x.dtype.kind == "f":
        values = xp.asarray(_feature_params(imputed_value_floats, features, "imputed values"),
                            dtype=x.dtype)
        target = x.dtype.type(replaced_value_float)
        hit = xp.isnan(x) if math.isnan(replaced_value_float) else x == target
    else:
        values = xp.asarray(_feature_params(imputed_value_int64s, features, "imputed values"))
        hit = x == replaced_value_int64
    return xp.where(hit, values.astype(x.dtype), x)


@kernel("FeatureVectorizer", 1, domain=ML, dtypes=NUMBERS)
def feature_vectorizer(xp, *xs, inputdimensions=()):
    """Each input, as [N, C] (1-D as [1, C]), is cut or zero-padded to its inputdimensions
    width, then all are concatenated."""
    if len(inputdimensions) != len(xs):
        raise ValueError(f"inputdimensions has {len(inputdimensions)} entries for {len(xs)} "
                         f"inputs")
    parts = []
    for a, width in zip(xs, inputdimensions, strict=True):
        a = a.reshape(1, -1) if a.ndim == 1 else a.reshape(a.shape[0], -1)
        a = a.astype(xp.float32)
        if a.shape[1] >= width:
            parts.append(a[:, :width])
        else:
            pad = xp.zeros((a.shape[0], width - a.shape[1]), dtype=xp.float32)
            parts.append(xp.concatenate([a, pad], axis=1))
    return xp.concatenate(parts, axis=1)


def _check_one_hot(node, provider):
    attrs = node.attributes
    ints, strings = attrs.get("cats_int64s"), attrs.get("cats_strings")
    require((ints is None) != (strings is None), "OneHotEncoder: exactly one of cats_int64s and "
            "cats_strings must be set", code="attribute")
    t = input_type(node)
    if t is not None:
        require((t == "string") == (strings is not None), "OneHotEncoder: {} input takes "
                "cats_{}", t, "strings" if t == "string" else "int64s", code="attribute")


@kernel("OneHotEncoder", 1, domain=ML, dtypes=NUMBERS | {"string"}, check=_check_one_hot)
def one_hot_encoder(xp, x, *, zeros, cats_int64s=None, cats_strings=None):
    """Numeric input is truncated to an integer before the look-up."""
    cats = list(cats_strings) if cats_strings is not None else list(cats_int64s)
    index = {}
    for i, c in enumerate(cats):
        index.setdefault(c, i)
    flat = x.reshape(-1).tolist()
    keys = [as_text(v) for v in flat] if x.dtype == object else [int(v) for v in flat]
    out = xp.zeros((len(keys), len(cats)), dtype=xp.float32)
    for i, k in enumerate(keys):
        j = index.get(k)
        if j is None:
            if not zeros:
                raise ValueError(f"OneHotEncoder: category {k!r} is not in the list")
            continue
        out[i, j] = 1.0
    return out.reshape(tuple(x.shape) + (len(cats),))


# what ``xp.compiled_linear_scores`` computes the scores for (its ``mode``)
REGRESSOR, CLASSIFIER, ONE_COLUMN = range(3)
NO_LABELS = np.zeros(0, np.int64)
PAIRWISE_BLOCK = 128  # softmax rows up to this long are summed as numpy sums them


class LinearScores:
    """A linear model's scores, worked out once per kernel: coefficients [columns, features]
    (float32, and transposed in float64), the bias (float32 values in float64; empty when
    none), the post transform's number, and what the scores are for (``mode``) with the
    labels' numbers (``label_codes``, int64)."""

    def __init__(self, coef, bias, kind, mode, labels):
        self.coef = coef
        self.coef_t64 = np.ascontiguousarray(coef.T.astype(np.float64))
        self.bias64 = bias.astype(np.float64)
        self.kind, self.mode, self.label_codes = kind, mode, labels
        columns = coef.shape[0]
        # a provider's compiled scores (``xp.compiled_linear_scores``) take every transform
        # but PROBIT, softmax rows short enough for numpy's pairwise sums
        self.compiled_kind = kind in (0, 2) or (kind in (1, 3) and columns <= PAIRWISE_BLOCK)
        self.work = columns * coef.shape[1]

    def compiled(self, xp, rows):
        """A provider's ``xp.compiled_linear_scores`` (the CPU EP's, numba) where it takes
        float32 ``rows``: a few of them; else ``None``."""
        fast = getattr(xp, "compiled_linear_scores", None)
        if (fast is None or not self.compiled_kind
                or rows.shape[0] * self.work > fast.MAX_WORK):
            return None
        return fast if fast.ready() else None

    def scores(self, xp, rows):
        """numpy's passes: the scores of float32 ``rows`` rounded to float32, in float64."""
        scores = rows @ xp.asarray(self.coef_t64)  # float32 rows read as float64
        if self.bias64.size:
            scores += xp.asarray(self.bias64)
        return scores.astype(xp.float32).astype(xp.float64)


def _check_linear_regressor(node, provider):
    attrs = node.attributes
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "LinearRegressor: post_transform must be one of {}, "
            "got {!r}", "/".join(TRANSFORM_NAMES), transform, code="attribute")
    coefficients, targets = attrs.get("coefficients") or (), attrs.get("targets", 1)
    require(targets >= 1 and len(coefficients) % targets == 0,
            "LinearRegressor: {} coefficients do not split into {} targets", len(coefficients),
            targets, code="attribute")
    intercepts = attrs.get("intercepts")
    require(not intercepts or len(intercepts) == targets,
            "LinearRegressor: {} intercepts for {} targets", len(intercepts or ()), targets,
            code="attribute")


def _linear_regressor_params(node):
    attrs = node.attributes
    intercepts = attrs.get("intercepts")
    coef = np.asarray(attrs.get("coefficients") or (), np.float32).reshape(
        attrs.get("targets", 1), -1)
    bias = (np.asarray(intercepts, np.float32) if intercepts else np.zeros(0, np.float32))
    kind = TRANSFORM_NAMES[attrs.get("post_transform") or "NONE"]
    return {"params": LinearScores(coef, bias, kind, REGRESSOR, NO_LABELS)}


@kernel("LinearRegressor", 1, domain=ML, dtypes=NUMBERS, check=_check_linear_regressor,
        bind=_linear_regressor_params)
def linear_regressor(xp, x, *, post_transform, targets, coefficients=(), intercepts=None,
                     params=None):
    """Each target's features summed in float64 (float32 features and coefficients), plus its
    intercept, rounded to float32; then the post transform."""
    rows = x if x.ndim == 2 else x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
    if params.coef.shape[1] != rows.shape[1]:
        raise ValueError(f"{params.coef.shape[1]} coefficients per target for {rows.shape[1]} "
                         f"features")
    if rows.dtype is not FLOAT32:
        rows = rows.astype(xp.float32)
    fast = params.compiled(xp, rows)
    if fast is not None:
        return fast(xp.ascontiguousarray(rows), params.coef_t64, params.bias64, params.kind,
                    REGRESSOR, NO_LABELS)[1]
    y = params.scores(xp, rows)
    if params.kind == 0:
        return y.astype(xp.float32)
    return transform_scores(xp, y, params.kind).astype(xp.float32)


# ---------------------------------------------------------------------------------------------
# LinearClassifier, Normalizer
# ---------------------------------------------------------------------------------------------


def _linear_labels(attrs):
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_ints")
    return list(strings) if strings else list(ints or ())


def _check_linear_classifier(node, provider):
    attrs = node.attributes
    op = "LinearClassifier"
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_ints")
    require(bool(strings) != bool(ints), "{}: exactly one of classlabels_strings and "
            "classlabels_ints must be set", op, code="attribute")
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "{}: post_transform must be one of {}, got {!r}", op,
            "/".join(TRANSFORM_NAMES), transform, code="attribute")
    coefficients, intercepts = attrs.get("coefficients") or (), attrs.get("intercepts") or ()
    require(intercepts, "{}: needs intercepts, one per score column (they give the number of "
            "columns)", op, code="attribute")
    targets, labels = len(intercepts), len(_linear_labels(attrs))
    require(coefficients and len(coefficients) % targets == 0, "{}: {} coefficients do not "
            "split into {} rows", op, len(coefficients), targets, code="attribute")
    if targets == 1:
        require(labels == 2, "{}: one score column needs exactly two class labels, got {}", op,
                labels, code="attribute")
        require(transform in ("NONE", "LOGISTIC"), "{}: one score column s gives [1 - s, s], "
                "which takes post_transform NONE or LOGISTIC, got {}", op, transform,
                code="attribute")
    else:
        require(labels == targets, "{}: {} class labels for {} score columns", op, labels,
                targets, code="attribute")


class LinearClassifierTables(LinearScores):
    """LinearClassifier's attributes as arrays, worked out once per kernel: the scores'
    tables (:class:`LinearScores`), the labels and their numbers (the labels themselves when
    ints, else their indices)."""

    def __init__(self, attrs):
        intercepts = attrs.get("intercepts") or ()
        coef = np.asarray(attrs.get("coefficients") or (), np.float32)
        self.labels = _linear_labels(attrs)
        self.int_labels = (None if isinstance(self.labels[0], str)
                           else np.asarray(self.labels, np.int64))
        codes = (np.arange(len(self.labels), dtype=np.int64) if self.int_labels is None
                 else self.int_labels)
        super().__init__(coef.reshape(len(intercepts), -1), np.asarray(intercepts, np.float32),
                         TRANSFORM_NAMES[attrs.get("post_transform") or "NONE"],
                         ONE_COLUMN if len(intercepts) == 1 else CLASSIFIER, codes)


def _linear_classifier_tables(node):
    return {"tables": LinearClassifierTables(node.attributes)}


@kernel("LinearClassifier", 1, domain=ML, dtypes=NUMBERS, check=_check_linear_classifier,
        bind=_linear_classifier_tables)
def linear_classifier(xp, x, *, multi_class, post_transform, classlabels_ints=None,
                      classlabels_strings=None, coefficients=None, intercepts=None,
                      tables=None):
    """The label is the class of the highest raw score (the first on ties); with one score
    column s, the second class where s > 0, and scores [1 - p, p] for p = s or its logistic.
    multi_class does not change the scores."""
    if x.ndim not in (1, 2):
        raise ValueError(f"takes [N, features] or [features] input, got shape {x.shape}")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    if rows.dtype is not FLOAT32:
        rows = rows.astype(xp.float32)
    if tables.coef.shape[1] != rows.shape[1]:
        raise ValueError(f"{tables.coef.shape[1]} coefficients per class for {rows.shape[1]} "
                         f"features")
    fast = tables.compiled(xp, rows)
    if fast is not None:
        winner, out = fast(xp.ascontiguousarray(rows), tables.coef_t64, tables.bias64,
                           tables.kind, tables.mode, tables.label_codes)
        if tables.int_labels is None:
            return object_array(xp, [tables.labels[i] for i in winner.tolist()],
                                winner.shape), out
        return winner, out
    scores = tables.scores(xp, rows)
    if tables.mode == ONE_COLUMN:
        s = scores[:, 0]
        winner = (s > 0).astype(xp.intp)
        p = transform_scores(xp, scores, tables.kind)[:, 0]
        out = xp.stack([1 - p, p], axis=1)
    else:
        winner = scores.argmax(axis=1)
        out = transform_scores(xp, scores, tables.kind)
    if tables.int_labels is None:
        label = object_array(xp, [tables.labels[i] for i in winner.tolist()], winner.shape)
    else:
        label = xp.asarray(tables.int_labels).take(winner)
    return label, out.astype(xp.float32)


NORMS = ("MAX", "L1", "L2")


def _normalized_row(row, norm):
    """One short row of finite float64 values normalized as the numpy path does."""
    if norm == "MAX":
        divisor = max(row) if row else 1.0
    elif norm == "L1":
        divisor = sum(abs(v) for v in row)
    else:
        divisor = math.sqrt(sum(v * v for v in row))
    if divisor == 0:
        return row
    return [v / divisor for v in row]


def _check_normalizer(node, provider):
    norm = node.attributes.get("norm", "MAX")
    require(norm in NORMS, "Normalizer: norm must be one of {}, got {!r}", "/".join(NORMS), norm,
            code="attribute")


def _normalizer_number(node):
    norm = node.attributes.get("norm", "MAX")
    return {"number": NORMS.index(norm) if norm in NORMS else -1}


@kernel("Normalizer", 1, domain=ML, dtypes=NUMBERS, check=_check_normalizer,
        bind=_normalizer_number)
def normalizer(xp, x, *, norm, number=-1):
    """Each row divided by its largest value (MAX, signed), the sum of its magnitudes (L1) or
    its Euclidean length (L2); a row whose divisor is 0 stays as it is. A NaN makes its whole
    row NaN (onnxruntime's MAX skips a NaN unless it comes first). ``number``: the norm's
    index in NORMS."""
    if x.ndim not in (1, 2):
        raise ValueError(f"takes [N, C] or [C] input, got shape {x.shape}")
    rows = (x.reshape(1, -1) if x.ndim == 1 else x).astype(xp.float32, copy=False)
    normalize = getattr(xp, "compiled_normalizer", None)  # a provider's one pass (numba)
    if (normalize is not None and 0 < rows.shape[1] <= PAIRWISE_BLOCK
            and rows.size <= normalize.MAX_SIZE and normalize.ready()):
        out = normalize(xp.ascontiguousarray(rows), number)
        return out if x.ndim == 2 else out.reshape(x.shape)
    if rows.__class__ is np.ndarray and rows.shape[0] == 1 and rows.shape[1] < SHORT_ROW:
        row = rows[0].tolist()
        if math.isfinite(sum(row)):  # NaN and infinities take numpy's path
            return np.array(_normalized_row(row, norm), np.float32).reshape(x.shape)
    rows = rows.astype(xp.float64)
    if norm == "MAX":
        divisor = rows.max(axis=1, keepdims=True) if rows.shape[1] else rows[:, :1]
    elif norm == "L1":
        divisor = xp.abs(rows).sum(axis=1, keepdims=True)
    else:
        divisor = xp.sqrt((rows * rows).sum(axis=1, keepdims=True))
    divisor = xp.where(divisor == 0, 1.0, divisor)
    with np.errstate(invalid="ignore"):
        return (rows / divisor).astype(xp.float32).reshape(x.shape)

"""Support vector machines of the ``ai.onnx.ml`` domain: SVMClassifier (one-vs-one votes, Platt
scaling and pairwise coupling as onnxruntime computes them) and SVMRegressor. Every row is
scored at once: one kernel matrix against the support vectors, one product for all pairs.
"""

from __future__ import annotations

import numpy as np

from ep_host import deny, require
from ep_host.kernels.helpers import object_array, two_columns
from ep_host.kernels.ml import ML, NUMBERS, TRANSFORM_NAMES, given_array, transform_scores
from ep_host.kernels.registry import kernel

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _rows(x):
    if x.ndim not in (1, 2):
        raise ValueError(f"takes [N, features] or [features] input, got shape {x.shape}")
    return x.reshape(1, -1) if x.ndim == 1 else x


def kernel_matrix(xp, x, vectors, kernel_type, kernel_params, vector_norms=None):
    """K[n, v] = kernel(x[n], vectors[v]) in float64; kernel_params are gamma, coef0, degree
    (zeros when absent); ``vector_norms``: each vector's squared length, when worked out
    already."""
    gamma, coef0, degree = (list(kernel_params) or [0.0, 0.0, 0.0])[:3]
    if kernel_type == "RBF":
        if vector_norms is None:
            vector_norms = (vectors * vectors).sum(axis=1)
        # (|x|^2 + |v|^2) - 2 x.v, each step in place on one array
        squared = (x * x).sum(axis=1)[:, None] + vector_norms[None, :]
        dot = x @ vectors.T
        dot *= 2
        squared -= dot
        xp.maximum(squared, 0.0, out=squared)
        squared *= -gamma
        return xp.exp(squared, out=squared)
    dot = x @ vectors.T
    if kernel_type == "POLY":
        return (gamma * dot + coef0) ** degree
    if kernel_type == "SIGMOID":
        return xp.tanh(gamma * dot + coef0)
    return dot


def _features(x, n_features, op):
    """The input's rows as float32 (onnxruntime reads every input type so), C-contiguous."""
    if x.ndim == 2 and x.shape[1] == n_features and x.dtype is FLOAT32 and x.flags.c_contiguous:
        return x
    rows = _rows(x)
    if rows.shape[1] != n_features:
        raise ValueError(f"{op}: the model has {n_features} features per row, the input "
                         f"{rows.shape[1]}")
    return np.ascontiguousarray(rows, dtype=np.float32)


def _check_common(node, op):
    attrs = node.attributes
    kernel_type = attrs.get("kernel_type", "LINEAR")
    require(kernel_type in KERNELS, "{}: kernel_type must be one of {}, got {!r}", op,
            "/".join(KERNELS), kernel_type, code="attribute")
    params = attrs.get("kernel_params") or ()
    require(len(params) in (0, 3), "{}: kernel_params holds gamma, coef0 and degree, got {} "
            "values", op, len(params), code="attribute")
    coefficients = node.attribute_array("coefficients")  # an array: no tuple of thousands
    require(coefficients is not None and len(coefficients), "{}: coefficients are required", op,
            code="attribute")
    require(attrs.get("rho"), "{}: rho is required", op, code="attribute")
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "{}: post_transform must be one of {}, got {!r}", op,
            "/".join(TRANSFORM_NAMES), transform, code="attribute")
    return transform


# ---------------------------------------------------------------------------------------------
# SVMClassifier
# ---------------------------------------------------------------------------------------------


def _labels(attrs):
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_ints")
    return list(strings) if strings else list(ints or ())


def _check_classifier(node, provider):
    attrs = node.attributes
    op = "SVMClassifier"
    transform = _check_common(node, op)
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_ints")
    require(bool(strings) != bool(ints), "{}: exactly one of classlabels_strings and "
            "classlabels_ints must be set", op, code="attribute")
    k = len(_labels(attrs))
    require(k >= 2, "{}: needs at least two class labels, got {}", op, k, code="attribute")
    per_class = list(attrs.get("vectors_per_class") or ())
    coefficients, rho = node.attribute_array("coefficients"), attrs["rho"]
    prob_a, prob_b = attrs.get("prob_a") or (), attrs.get("prob_b") or ()
    require(len(prob_a) == len(prob_b), "{}: prob_a has {} values, prob_b {}", op, len(prob_a),
            len(prob_b), code="attribute")
    vectors = sum(per_class)
    if vectors == 0:  # liblinear: one row of coefficients per class, all sharing rho[0]
        require(k > 2, "{}: two classes with linear coefficients and no support vectors: the "
                "spec does not say how the label is chosen", op, code="attribute")
        require(len(coefficients) % k == 0, "{}: {} coefficients do not split into {} classes",
                op, len(coefficients), k, code="attribute")
        require(not prob_a, "{}: prob_a/prob_b need support vectors", op, code="attribute")
        return
    pairs = k * (k - 1) // 2
    require(len(per_class) == k, "{}: vectors_per_class has {} entries for {} classes", op,
            len(per_class), k, code="attribute")
    require(len(coefficients) == (k - 1) * vectors, "{}: {} coefficients, expected (classes - 1)"
            " x support vectors = {}", op, len(coefficients), (k - 1) * vectors,
            code="attribute")
    support = given_array(node, "support_vectors")
    require(len(support) and len(support) % vectors == 0, "{}: {} support_vectors values do "
            "not split into {} vectors", op, len(support), vectors, code="attribute")
    require(len(rho) == pairs, "{}: rho has {} values for {} class pairs", op, len(rho), pairs,
            code="attribute")
    require(not prob_a or len(prob_a) == pairs, "{}: prob_a has {} values for {} class pairs",
            op, len(prob_a), pairs, code="attribute")
    if k == 2 and not prob_a:
        require(transform in ("NONE", "LOGISTIC"), "{}: two classes without probabilities give "
                "one decision value, which takes post_transform NONE or LOGISTIC, got {}", op,
                transform, code="attribute")


def _pair_weights(coefficients, per_class):
    """W [vectors, pairs] such that (K @ W)[:, p] is the decision value of pair p = (i, j) before
    rho: class i's vectors weighted by coefficient row j - 1, class j's by row i (libsvm's
    layout of the dual coefficients)."""
    k, vectors = len(per_class), sum(per_class)
    coef = np.asarray(coefficients, dtype=np.float32).astype(np.float64).reshape(k - 1, vectors)
    start = np.concatenate([[0], np.cumsum(per_class)]).astype(int)
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    weights = np.zeros((vectors, len(pairs)))
    for p, (i, j) in enumerate(pairs):
        weights[start[i]:start[i + 1], p] = coef[j - 1, start[i]:start[i + 1]]
        weights[start[j]:start[j + 1], p] = coef[i, start[j]:start[j + 1]]
    return weights, pairs


def _float32_values(values):
    """Attribute floats as onnxruntime reads them: float32, computed with in float64."""
    return np.asarray(values, dtype=np.float32).astype(np.float64)


class SupportVectors:
    """An SVM's support vectors and kernel, worked out once per node: the vectors [vectors,
    features] in float64 (and transposed), each vector's squared length (RBF), the kernel's
    type, its number in KERNELS and its gamma, coef0 and degree."""

    def __init__(self, attrs, count):
        self.vectors = _float32_values(attrs["support_vectors"]).reshape(count, -1)
        self.vectors_t = np.ascontiguousarray(self.vectors.T)  # xp.compiled_svm_decisions's
        self.norms = (self.vectors * self.vectors).sum(axis=1)
        self.n_features = self.vectors.shape[1]
        self.kernel_type = attrs.get("kernel_type", "LINEAR")
        self.kernel_number = KERNELS.index(self.kernel_type)
        self.kernel_params = tuple(float(v) for v in attrs.get("kernel_params") or ())

    def kernels(self, xp, rows):
        """The kernel matrix of float64 ``rows`` (numpy's passes)."""
        return kernel_matrix(xp, rows, self.vectors, self.kernel_type, self.kernel_params,
                             self.norms)

    def compiled(self, xp, rows):
        """A provider's ``xp.compiled_svm_decisions`` (the CPU EP's, numba) where it takes
        ``rows`` (float32): a few of them; else ``None``."""
        decide = getattr(xp, "compiled_svm_decisions", None)
        if decide is None or rows.shape[0] * self.vectors.size > decide.MAX_WORK:
            return None
        return decide if decide.ready() else None

    def decisions(self, decide, rows, weights_t, bias, pair_classes=None, labels=None):
        """``decide``'s (totals, scores, winner) of float32 ``rows``: the kernel values
        rounded to float32, weighted by ``weights_t`` [decisions, vectors], plus ``bias``;
        ``winner`` the label (of int64 ``labels``, one per class) with the most votes."""
        gamma, coef0, degree = self.kernel_params or (0.0, 0.0, 0.0)
        return decide(rows, self.vectors_t, weights_t, bias, self.kernel_number, gamma, coef0,
                      degree, NO_PAIRS if pair_classes is None else pair_classes,
                      NO_LABELS if labels is None else labels)


NO_PAIRS = np.zeros((1, 2), dtype=np.int64)  # the regressor's one decision votes for no class
NO_LABELS = np.zeros(0, dtype=np.int64)
FLOAT32 = np.dtype(np.float32)  # native float32: an array's dtype is this very object


class ClassifierTables:
    """SVMClassifier's attributes as arrays: the labels, the support vectors, the pairs'
    weights, biases and voting matrices; or, without support vectors (liblinear), one row of
    coefficients per class."""

    def __init__(self, attrs):
        labels = _labels(attrs)
        self.labels, self.k = labels, len(labels)
        self.int_labels = (None if isinstance(labels[0], str)
                           else np.asarray(labels, dtype=np.int64))
        # each class's label as a compiled vote gives it: itself when an int, else its index
        self.label_codes = (np.arange(self.k, dtype=np.int64) if self.int_labels is None
                            else self.int_labels)
        per_class = list(attrs.get("vectors_per_class") or ())
        rho = attrs["rho"]
        if sum(per_class) == 0:  # liblinear: one linear score per class
            self.support = None
            self.coef = _float32_values(attrs["coefficients"]).reshape(self.k, -1)
            self.bias = np.float64(np.float32(rho[0]))
            return
        self.pair_weights, self.pairs = _pair_weights(attrs["coefficients"], per_class)
        self.pair_weights_t = np.ascontiguousarray(self.pair_weights.T)
        self.pair_classes = np.array(self.pairs, dtype=np.int64).reshape(-1, 2)
        self.support = SupportVectors(attrs, self.pair_weights.shape[0])
        self.rho = _float32_values(rho)
        # Platt's scaling, float32 as onnxruntime reads it (none: no probabilities)
        self.prob_a = np.asarray(attrs.get("prob_a") or (), dtype=np.float32)
        self.prob_b = np.asarray(attrs.get("prob_b") or (), dtype=np.float32)
        first = np.zeros((len(self.pairs), self.k))
        second = np.zeros((len(self.pairs), self.k))
        for p, (i, j) in enumerate(self.pairs):
            first[p, i] = 1
            second[p, j] = 1
        # votes = wins @ first + (1 - wins) @ second = wins @ (first - second) + column sums
        self.vote_change, self.second_votes = first - second, second.sum(axis=0)

    def label_array(self, xp, winner):
        if self.int_labels is None:
            return object_array(xp, [self.labels[i] for i in winner.tolist()], winner.shape)
        return xp.asarray(self.int_labels)[winner]


TABLES = ("coefficients", "support_vectors")


def _with_tables(node):
    """``node.attributes``, its coefficients and support vectors as arrays
    (``NodeView.attribute_array``) rather than tuples: an SVC export holds thousands."""
    attrs = node.attributes
    out = {name: attrs[name] for name in attrs if name not in TABLES}
    out.update((name, node.attribute_array(name)) for name in TABLES if name in attrs)
    return out


def _bind_classifier(node):
    return {"tables": ClassifierTables(_with_tables(node))}


def pairwise_coupling(r):
    """Class probabilities [rows, k] from pairwise ones r [rows, k, k] (r[i, j]: P(i | i or j)),
    by the iterative method of Wu, Lin and Weng (2004) with onnxruntime's stopping rule (at
    most 100 sweeps, until every |Qp_t - pQp| < 0.005 / k), in float32 as onnxruntime runs it.
    A row stops on its own; the others go on."""
    rows, k = r.shape[0], r.shape[1]
    f = np.float32
    q = -r.transpose(0, 2, 1) * r  # q[i, j] = -r[j, i] r[i, j]
    diagonal = (r * r).sum(axis=1) - np.einsum("nii->ni", r * r)
    q[:, np.arange(k), np.arange(k)] = diagonal
    q = q.astype(f)
    p = np.full((rows, k), f(1) / f(k), dtype=f)
    eps = f(0.005) / f(k)
    active = np.ones(rows, dtype=bool)
    for _ in range(100):
        qp = np.einsum("nij,nj->ni", q, p).astype(f)
        pqp = (p * qp).sum(axis=1).astype(f)
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        for t in range(k):
            diff = (pqp - qp[:, t]) / q[:, t, t]
            diff = np.where(active, diff, f(0)).astype(f)
            scale = f(1) + diff
            p[:, t] += diff
            pqp = ((pqp + diff * (diff * q[:, t, t] + f(2) * qp[:, t])) / scale / scale).astype(f)
            qp = ((qp + diff[:, None] * q[:, t, :]) / scale[:, None]).astype(f)
            p = (p / scale[:, None]).astype(f)
    return p


def platt_pairwise(fapb, pairs, k):
    """r [rows, k, k] (float32) from each pair's ``a d + b`` [rows, pairs] (float32, Platt's
    scaling of the decision value d): for pair p = (i, j), r[:, i, j] = P(i | i or j) =
    1 / (1 + exp(a d + b)) (the sigmoid in float64), kept within [1e-7, 1 - 1e-7], and
    r[:, j, i] = 1 - that; the diagonal 0."""
    pairwise = (1 - transform_scores(np, fapb.astype(np.float64), 2)).astype(np.float32)
    np.maximum(pairwise, np.float32(1e-7), out=pairwise)  # np.clip's checks: 5 us of a few rows
    np.minimum(pairwise, np.float32(1 - 1e-7), out=pairwise)
    r = np.zeros((fapb.shape[0], k, k), dtype=np.float32)
    for p, (i, j) in enumerate(pairs):
        r[:, i, j] = pairwise[:, p]
        r[:, j, i] = 1 - pairwise[:, p]
    return r


def _probabilities(xp, scores, tables):
    """The class probabilities of the pairs' decision values: Platt's ``a d + b`` in float32
    (numpy's product and sum, each rounded), then the CPU EP's compiled sigmoid and coupling,
    or numpy's."""
    fapb = scores.astype(np.float32) * tables.prob_a
    fapb += tables.prob_b
    compiled = getattr(xp, "compiled_pairwise_coupling", None)  # the CPU EP's, numba
    if compiled is not None and compiled.ready():
        return compiled(fapb, tables.pair_classes, tables.k)
    return pairwise_coupling(platt_pairwise(fapb, tables.pairs, tables.k))


@kernel("SVMClassifier", 1, domain=ML, dtypes=NUMBERS, check=_check_classifier,
        bind=_bind_classifier)
def svm_classifier(xp, x, *, kernel_type, post_transform, classlabels_ints=None,
                   classlabels_strings=None, kernel_params=None, prob_a=None, prob_b=None,
                   rho=None, vectors_per_class=None, tables=None):
    """The label is the class with the most one-vs-one votes (the first on ties; a pair's
    decision value above 0 votes for its first class), also when probabilities are asked for.
    Scores: with prob_a/prob_b, the coupled class probabilities; without, the pairs' decision
    values (two classes: [-d, d], or their logistic); then the post transform. The
    coefficients and support vectors are read by ``bind`` as arrays, not passed as tuples."""
    k = tables.k
    if tables.support is None:  # liblinear: one linear score per class
        rows = _features(x, tables.coef.shape[1], "SVMClassifier").astype(np.float64)
        scores = rows @ tables.coef.T + tables.bias
        winner = scores.argmax(axis=1)
        out = transform_scores(xp, scores, TRANSFORM_NAMES[post_transform])
        return tables.label_array(xp, winner), out.astype(xp.float32)
    support = tables.support
    rows = _features(x, support.n_features, "SVMClassifier")
    decide = support.compiled(xp, rows)
    if decide is not None:
        _, scores, label = support.decisions(decide, rows, tables.pair_weights_t, tables.rho,
                                             tables.pair_classes, tables.label_codes)
        if tables.int_labels is None:  # the winners' indices
            label = object_array(xp, [tables.labels[i] for i in label.tolist()], label.shape)
    else:
        kernels = support.kernels(xp, rows.astype(np.float64)).astype(np.float32)
        scores = kernels.astype(np.float64) @ tables.pair_weights
        scores += tables.rho
        scores = scores.astype(np.float32)
        votes = (scores > 0).astype(np.float64) @ tables.vote_change
        votes += tables.second_votes  # whole numbers: exact in any order
        label = tables.label_array(xp, votes.argmax(axis=1))
    if prob_a:
        out = _probabilities(xp, scores, tables)
        if post_transform != "NONE":
            out = transform_scores(xp, out.astype(np.float64), TRANSFORM_NAMES[post_transform])
    elif k == 2:
        d = scores[:, 0].astype(np.float64)
        if post_transform == "LOGISTIC":
            out = two_columns(xp, transform_scores(xp, -d[:, None], 2)[:, 0],
                              transform_scores(xp, d[:, None], 2)[:, 0])
        else:
            out = two_columns(xp, -d, d)
    elif post_transform == "NONE":
        out = scores  # float32 already, and ours
    else:
        out = transform_scores(xp, scores.astype(np.float64), TRANSFORM_NAMES[post_transform])
    return label, (out if out.dtype is FLOAT32 else out.astype(xp.float32))


# ---------------------------------------------------------------------------------------------
# SVMRegressor
# ---------------------------------------------------------------------------------------------


def _check_regressor(node, provider):
    attrs = node.attributes
    op = "SVMRegressor"
    transform = _check_common(node, op)
    require(transform == "NONE", "{}: post_transform {} is not applied by onnxruntime and its "
            "meaning for one regression value is not specified; only NONE is run", op,
            transform, code="attribute")
    n_supports = attrs.get("n_supports", 0)
    coefficients = node.attribute_array("coefficients")
    if n_supports > 0:
        support = given_array(node, "support_vectors")
        require(len(coefficients) == n_supports, "{}: {} coefficients for {} support vectors",
                op, len(coefficients), n_supports, code="attribute")
        require(len(support) and len(support) % n_supports == 0, "{}: {} support_vectors values "
                "do not split into {} vectors", op, len(support), n_supports, code="attribute")
    elif n_supports < 0:
        deny("{}: n_supports must not be negative, got {}", op, n_supports, code="attribute")


def _bind_regressor(node):
    attrs = _with_tables(node)
    n_supports = attrs.get("n_supports", 0)
    support = SupportVectors(attrs, n_supports) if n_supports > 0 else None
    coef = _float32_values(attrs["coefficients"])
    bias = np.float64(np.float32(attrs["rho"][0]))
    # the one decision as ``xp.compiled_svm_decisions`` takes it
    decision = (np.ascontiguousarray(coef.reshape(1, -1)), np.array([bias]))
    return {"support": support, "coef": coef, "bias": bias, "decision": decision}


@kernel("SVMRegressor", 1, domain=ML, dtypes=NUMBERS, check=_check_regressor,
        bind=_bind_regressor)
def svm_regressor(xp, x, *, kernel_type, n_supports, one_class, post_transform,
                  kernel_params=None, rho=None, support=None, coef=None, bias=None,
                  decision=None):
    """Output [N, 1]; with one_class, 1 where the decision value is above 0 and -1 elsewhere."""
    if support is not None:
        rows = _features(x, support.n_features, "SVMRegressor")
        decide = support.compiled(xp, rows)
        if decide is not None:
            y = support.decisions(decide, rows, *decision)[0][:, 0]
        else:
            kernels = support.kernels(xp, rows.astype(np.float64))
            y = kernels.astype(np.float32).astype(np.float64) @ coef + bias
    else:
        rows = _features(x, coef.shape[0], "SVMRegressor").astype(np.float64)
        y = rows @ coef + bias
    if one_class:
        y = xp.where(y > 0, 1.0, -1.0)
    return y.astype(xp.float32).reshape(-1, 1)

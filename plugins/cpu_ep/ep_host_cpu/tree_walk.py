"""A tree ensemble's few-row walk compiled by numba, bound on the CPU EP's namespace as
``xp.compiled_tree_walk`` for the library's tree ensembles (``ep_host.kernels.trees``); numpy's
level-by-level passes otherwise, and with ``EP_HOST_NUMBA=0``.

Each (row, tree) pair walks from its root to its leaf one node at a time and adds the leaf's
votes to the row's float64 scores in tree order, as numpy's passes add them; then the row's
scores are averaged, zeroed where no leaf voted and given their base values there too (each a
numpy call of about a microsecond on one row). numpy's passes cost about 15 calls of a
microsecond or more whatever the rows, so one row of a small forest spends most of its time in
them; a walk per pair loses to them on many pairs (it reads the nodes in no order numpy's
vector loops can use), so it is asked only up to ``MAX_PAIRS``. (Four trees walked side by
side, or a compare without a branch, ran slower here: one row's branches are predicted.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import compiled, numba_wanted

# columns of the node table: the feature a node reads, its child when ``value <= split`` fails,
# when it holds, and the child a NaN value takes (0: the first, 1: the second)
FEATURE, FALSE_CHILD, TRUE_CHILD, NAN_CHILD = range(4)
NO_HIT = np.zeros((0, 0), dtype=bool)  # votes not tracked: never written
NO_BASE = np.zeros(0)


def tree_walk(x, splits, nodes, roots, weights, has, depth, n_interior, divisor, base, scores,
              hit):
    """For each row r of ``x`` and tree t: walk from ``roots[t]`` while the node is interior
    (below ``n_interior``; at most ``depth`` steps), then add ``weights[leaf]`` to
    ``scores[r]`` and or ``has[leaf]`` into ``hit[r]`` (``hit`` empty: not tracked). Then each
    of the row's scores is divided by ``divisor``, set to 0 where tracked and not hit, and
    ``base`` added (when not empty)."""
    rows = x.shape[0]
    targets = scores.shape[1]
    track = hit.shape[0] > 0
    with_base = base.shape[0] > 0
    for r in range(rows):
        for t in range(roots.shape[0]):
            node = roots[t]
            for _ in range(depth):
                if node >= n_interior:
                    break
                value = x[r, nodes[node, FEATURE]]
                if value != value:
                    node = nodes[node, FALSE_CHILD + nodes[node, NAN_CHILD]]
                elif value <= splits[node]:
                    node = nodes[node, TRUE_CHILD]
                else:
                    node = nodes[node, FALSE_CHILD]
            leaf = node - n_interior
            for k in range(targets):
                scores[r, k] += weights[leaf, k]
            if track:
                for k in range(targets):
                    if has[leaf, k]:
                        hit[r, k] = True
        for k in range(targets):
            s = scores[r, k] / divisor
            if track and not hit[r, k]:
                s = 0.0
            scores[r, k] = s + base[k] if with_base else s


def signature(numba: Any, dtype: str) -> list[Any]:
    types = numba.types
    value = getattr(types, dtype)
    read2 = types.Array(value, 2, "C", readonly=True)
    read1 = types.Array(value, 1, "C", readonly=True)
    ints2 = types.Array(types.int64, 2, "C", readonly=True)
    ints1 = types.Array(types.int64, 1, "C", readonly=True)
    floats2 = types.Array(types.float64, 2, "C", readonly=True)
    flags2 = types.Array(types.boolean, 2, "C", readonly=True)
    return [types.void(read2, read1, ints2, ints1, floats2, flags2, types.int64, types.int64,
                       types.float64, types.Array(types.float64, 1, "C", readonly=True),
                       types.Array(types.float64, 2, "C"), types.Array(types.boolean, 2, "C"))]


class CompiledTreeWalk:
    """``xp.compiled_tree_walk``: :meth:`ready` says whether the compiled walk is used for an
    input dtype (float32 or float64; numba installed and wanted; built, or read back, the
    first time it says yes for that dtype); calling it scores a few rows."""

    DTYPES = ("float32", "float64")
    # (row, tree) pairs up to which the walk is asked. Measured here, walk / numpy's passes in
    # us: a 20-tree depth-6 forest (1,458 nodes) 3.7 / 16.5 on one row, 28 / 131 on 64, 1035 /
    # 1265 on 1,024; a 100-tree depth-3 one 4.3 / 15.2 on one row, 22 / 67 on 16, 149 / 159 on
    # 64 (6,400 pairs), 3041 / 1918 on 1,024. Both gave the same scores, bit for bit.
    MAX_PAIRS = 4096

    def __init__(self) -> None:
        self._compiled: dict[np.dtype, Any] = {}

    def ready(self, dtype: Any) -> bool:
        found = self._compiled.get(dtype)  # a dtype object: numpy builds its name each time
        if found is None:
            name = np.dtype(dtype).name
            if name in self.DTYPES and numba_wanted():
                kernel = compiled(tree_walk, signature, args=(name,))
                # the tables are ours and ``__call__`` makes the rest: the built module's
                # per-call checks of ten arrays (2 us, the walk of one row 1-2) are not needed
                found = getattr(kernel, "unchecked", kernel) or False
            else:
                found = False
            self._compiled[np.dtype(dtype)] = self._compiled[dtype] = found
        return bool(found)

    def bind(self, dtype, splits, nodes, roots, weights, has, depth: int, n_interior: int,
             track: bool, divisor: float = 1.0, base=None):
        """:meth:`__call__` with every argument but ``x`` bound, for a forest that walks many
        inputs of ``dtype`` (after :meth:`ready` said yes for it): ``walk(x)``, ``x`` a
        C-contiguous matrix of ``dtype`` the caller checked, of at most :data:`MAX_PAIRS`
        (row, tree) pairs. The checks and look-ups of a call took 2-3 us of a 10-tree
        ensemble's 12 on one row."""
        kernel = self._compiled[np.dtype(dtype)]
        targets = weights.shape[1]
        base = NO_BASE if base is None else base
        zeros = np.zeros

        def walk(x):
            rows = x.shape[0]
            scores = zeros((rows, targets))
            hit = zeros((rows, targets), dtype=bool) if track else NO_HIT
            kernel(x, splits, nodes, roots, weights, has, depth, n_interior, divisor, base,
                   scores, hit)
            return scores, (hit if track else None)

        return walk

    def __call__(self, x, splits, nodes, roots, weights, has, depth: int, n_interior: int,
                 track: bool, divisor: float = 1.0, base=None):
        """``(scores, hit)`` of ``x`` [rows, features]: float64 [rows, targets] sums of the
        leaves' ``weights`` divided by ``divisor``, 0 where no leaf voted (when ``track``),
        plus ``base`` (float64 [targets]) when given; and whether some leaf voted for each
        (``None`` unless ``track``). Call only after :meth:`ready` said yes for ``x``'s dtype,
        with ``splits`` of that dtype, int64 ``nodes`` [nodes, 4] and ``roots``, float64
        ``weights`` and bool ``has`` [leaves, targets], all C-contiguous."""
        if x.ndim != 2 or not x.flags.c_contiguous:
            raise ValueError(f"the tree walk takes a C-contiguous matrix, got {x.shape}")
        rows, targets = x.shape[0], weights.shape[1]
        scores = np.zeros((rows, targets))
        hit = np.zeros((rows, targets), dtype=bool) if track else NO_HIT
        self._compiled[x.dtype](x, splits, nodes, roots, weights, has, depth, n_interior,
                                divisor, NO_BASE if base is None else base, scores, hit)
        return scores, (hit if track else None)

"""scikit-learn models exported as skl2onnx's users export them, run on ep-host's CPU EP and on
onnxruntime: whether each runs and matches, and its session creation and latency ratios.

The corpus (bench/corpus.py) exports six estimators with a fixed batch and ZipMap off, as a
benchmark feeds them. These are exported with skl2onnx's defaults: an open batch dim (``None``),
ZipMap on for classifiers (a list of {class: probability} maps), skl2onnx's own opsets. 45
estimators and pipelines: linear models, trees and forests, boosting, SVMs, neighbours, naive
Bayes, MLPs, decompositions, scalers, imputers, feature selection, clustering.

    python3 bench/sklearn_exports.py build [--venv DIR] [--out DIR]
    .venv/bin/python bench/sklearn_exports.py check [--out DIR] [--repeat 20] [--json FILE]

``build`` exports in the corpus's bench-only venv (bench/corpus.py installs it); ``check`` runs
in the project's venv, one thread on both sides, creations and runs alternating.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))  # bench/ is not a package: its scripts import each other by name
DEFAULT_OUT = BENCH / ".sklearn"
FEATURES, ROWS, SEED = 8, 7, 0


def estimators() -> dict[str, tuple[Any, str | None]]:
    """Name -> (unfitted estimator, target kind: "reg", "cls", "bin", "str" or None)."""
    from sklearn import (
        cluster,
        decomposition,
        ensemble,
        feature_selection,
        impute,
        linear_model,
        naive_bayes,
        neighbors,
        neural_network,
        pipeline,
        preprocessing,
        svm,
        tree,
    )
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    pipe = pipeline.make_pipeline
    return {
        "linear_regression": (linear_model.LinearRegression(), "reg"),
        "ridge": (linear_model.Ridge(), "reg"),
        "lasso": (linear_model.Lasso(alpha=0.01), "reg"),
        "elastic_net": (linear_model.ElasticNet(alpha=0.01), "reg"),
        "sgd_regressor": (linear_model.SGDRegressor(random_state=SEED), "reg"),
        "huber": (linear_model.HuberRegressor(), "reg"),
        "logistic_regression": (linear_model.LogisticRegression(max_iter=500), "cls"),
        "logistic_regression_binary": (linear_model.LogisticRegression(), "bin"),
        "logistic_regression_strings": (linear_model.LogisticRegression(max_iter=500), "str"),
        "sgd_classifier": (linear_model.SGDClassifier(loss="log_loss", random_state=SEED), "cls"),
        "ridge_classifier": (linear_model.RidgeClassifier(), "cls"),
        "perceptron": (linear_model.Perceptron(random_state=SEED), "cls"),
        "decision_tree_regressor": (tree.DecisionTreeRegressor(max_depth=6, random_state=SEED),
                                    "reg"),
        "decision_tree_classifier": (tree.DecisionTreeClassifier(max_depth=6,
                                                                 random_state=SEED), "cls"),
        "random_forest_regressor": (ensemble.RandomForestRegressor(
            n_estimators=10, max_depth=6, random_state=SEED), "reg"),
        "random_forest_classifier": (ensemble.RandomForestClassifier(
            n_estimators=10, max_depth=6, random_state=SEED), "cls"),
        "extra_trees_classifier": (ensemble.ExtraTreesClassifier(
            n_estimators=10, max_depth=6, random_state=SEED), "cls"),
        "gradient_boosting_regressor": (ensemble.GradientBoostingRegressor(
            n_estimators=20, random_state=SEED), "reg"),
        "gradient_boosting_classifier": (ensemble.GradientBoostingClassifier(
            n_estimators=20, random_state=SEED), "cls"),
        "gradient_boosting_binary": (ensemble.GradientBoostingClassifier(
            n_estimators=20, random_state=SEED), "bin"),
        "adaboost_regressor": (ensemble.AdaBoostRegressor(n_estimators=10, random_state=SEED),
                               "reg"),
        "adaboost_classifier": (ensemble.AdaBoostClassifier(n_estimators=10, random_state=SEED),
                                "cls"),
        "svc_rbf": (svm.SVC(random_state=SEED), "cls"),
        "svc_probability": (svm.SVC(probability=True, random_state=SEED), "cls"),
        "svc_linear_binary": (svm.SVC(kernel="linear", random_state=SEED), "bin"),
        "svr": (svm.SVR(), "reg"),
        "linear_svc": (svm.LinearSVC(random_state=SEED), "cls"),
        "linear_svr": (svm.LinearSVR(random_state=SEED), "reg"),
        "k_neighbors_regressor": (neighbors.KNeighborsRegressor(), "reg"),
        "k_neighbors_classifier": (neighbors.KNeighborsClassifier(), "cls"),
        "gaussian_nb": (naive_bayes.GaussianNB(), "cls"),
        "mlp_regressor": (neural_network.MLPRegressor(max_iter=200, random_state=SEED), "reg"),
        "mlp_classifier": (neural_network.MLPClassifier(max_iter=200, random_state=SEED), "cls"),
        "linear_discriminant": (LinearDiscriminantAnalysis(), "cls"),
        "scaler_logistic": (pipe(preprocessing.StandardScaler(),
                                 linear_model.LogisticRegression(max_iter=500)), "cls"),
        "minmax_svr": (pipe(preprocessing.MinMaxScaler(), svm.SVR()), "reg"),
        "pca_random_forest": (pipe(decomposition.PCA(4), ensemble.RandomForestClassifier(
            n_estimators=5, max_depth=5, random_state=SEED)), "cls"),
        "impute_poly_ridge": (pipe(impute.SimpleImputer(), preprocessing.PolynomialFeatures(2),
                                   linear_model.Ridge()), "reg"),
        "normalizer_knn": (pipe(preprocessing.Normalizer(), neighbors.KNeighborsClassifier()),
                           "cls"),
        "robust_gradient_boosting": (pipe(preprocessing.RobustScaler(),
                                          ensemble.GradientBoostingRegressor(
                                              n_estimators=10, random_state=SEED)), "reg"),
        "kmeans": (cluster.KMeans(n_clusters=3, n_init=3, random_state=SEED), None),
        "pca": (decomposition.PCA(3), None),
        "truncated_svd": (decomposition.TruncatedSVD(3, random_state=SEED), None),
        "binarizer": (preprocessing.Binarizer(), None),
        "select_k_best": (feature_selection.SelectKBest(k=4), "cls"),
    }


def rows(count: int, seed: int = SEED):
    import numpy as np

    return np.random.default_rng(seed).standard_normal((count, FEATURES)).astype(np.float32)


def export_all(out: Path) -> None:
    """Fit each estimator on 300 random rows and export it with skl2onnx's defaults (run in the
    corpus venv); a failed export is reported and skipped."""
    import warnings

    import numpy as np
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    warnings.filterwarnings("ignore")
    x = rows(300)
    y_reg = (2 * x[:, 0] + x[:, 1] - x[:, 2] ** 2).astype(np.float32)
    y_cls = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 1).astype(int)
    targets = {"reg": y_reg, "cls": y_cls, "bin": (x[:, 0] > 0).astype(int),
               "str": np.array(["a", "b", "c"])[y_cls], None: None}
    out.mkdir(parents=True, exist_ok=True)
    for name, (estimator, kind) in estimators().items():
        try:
            estimator.fit(x, targets[kind]) if kind else estimator.fit(x)
            onx = to_onnx(estimator, initial_types=[("X", FloatTensorType([None, FEATURES]))])
            (out / f"{name}.onnx").write_bytes(onx.SerializeToString())
        except Exception as exc:  # noqa: BLE001 (skl2onnx's fault: reported, the rest go on)
            print(f"export failed: {name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    print(f"exported to {out}")


def same(want: Any, have: Any) -> str | None:
    """Why ``have`` differs from onnxruntime's ``want`` (``None`` where it does not): tensors
    within 1e-4 relative (labels exactly), ZipMap's lists of maps key by key."""
    import numpy as np

    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return f"a list of {len(want)} expected, got {type(have).__name__}"
        for a, b in zip(want, have, strict=True):
            if set(a) != set(b):
                return f"map keys {sorted(a)} expected, got {sorted(b)}"
            if any(not math.isclose(a[k], b[k], rel_tol=1e-4, abs_tol=1e-5) for k in a):
                return f"map {a} expected, got {b}"
        return None
    want, have = np.asarray(want), np.asarray(have)
    if want.shape != have.shape:
        return f"shape {have.shape}, expected {want.shape}"
    if want.dtype.kind in "OUSb" or want.dtype.kind in "iu":
        return None if (want.astype(str) == have.astype(str)).all() else "labels differ"
    if not np.allclose(have.astype(np.float64), want.astype(np.float64), rtol=1e-4, atol=1e-5):
        return f"max difference {np.max(np.abs(have - want)):.3g}"
    return None


def check_one(path: Path, repeat: int) -> dict[str, Any]:
    """One export: outputs compared, then creations and runs timed as bench/models.py times
    them (its sessions, one thread each; its creations; runs of 20 alternating)."""
    import models

    feeds = {"X": rows(ROWS, seed=1)}
    row: dict[str, Any] = {"model": path.stem}
    runs, outputs = {}, {}
    for runtime in models.RUNTIMES:
        try:
            runs[runtime] = models.make_session(runtime, str(path))
            outputs[runtime] = runs[runtime](feeds)
        except Exception as exc:  # noqa: BLE001 (reported as the row's result)
            row["result"] = f"{runtime} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            return row
    fault = next((f for f in map(same, outputs["onnxruntime"], outputs["ep-host"]) if f), None)
    row["result"] = "match" if fault is None else f"mismatch: {fault}"
    created = models.measure_creation(str(path), repeat)
    ran: dict[str, list[float]] = {r: [] for r in models.RUNTIMES}
    for i in range(repeat):
        for runtime in models.RUNTIMES[::-1] if i % 2 else models.RUNTIMES:
            run = runs[runtime]
            started = time.perf_counter()
            for _ in range(20):
                run(feeds)
            ran[runtime].append((time.perf_counter() - started) / 20)
    for key, times in (("creation", created), ("latency", ran)):
        row[f"{key}_ms"] = {r: statistics.median(v) * 1e3 for r, v in times.items()}
        row[f"{key}_ratio"] = row[f"{key}_ms"]["ep-host"] / row[f"{key}_ms"]["onnxruntime"]
    return row


def check(args: argparse.Namespace) -> None:
    from models import geomean

    paths = sorted(Path(args.out).glob("*.onnx"))
    if not paths:
        sys.exit(f"no exports in {args.out}: run `python3 bench/sklearn_exports.py build`")
    rows_out = []
    print(f"{'model':32} {'result':10} {'creation':>9} {'latency':>8}")
    for path in paths:
        row = check_one(path, args.repeat)
        rows_out.append(row)
        ratios = (f"{row['creation_ratio']:9.2f} {row['latency_ratio']:8.2f}"
                  if "creation_ratio" in row else "")
        print(f"{row['model']:32} {row['result'][:60]:10} {ratios}", flush=True)
    matched = [r for r in rows_out if r["result"] == "match"]
    print(f"{len(matched)}/{len(rows_out)} match onnxruntime")
    for key in ("creation_ratio", "latency_ratio"):
        values = [r[key] for r in rows_out if key in r]
        if values:
            worst = max(rows_out, key=lambda r: r.get(key, 0))
            print(f"{key.replace('_', ' ')}: geometric mean {geomean(values):.2f}, "
                  f"max {worst[key]:.2f} ({worst['model']}) over {len(values)} models")
    if args.json:
        Path(args.json).write_text(json.dumps(rows_out, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "check", "_export"])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where the ONNX files go")
    parser.add_argument("--venv", help="the bench-only venv (default: bench/corpus.py's)")
    parser.add_argument("--repeat", type=int, default=20,
                        help="timed creations, and runs of 20, per runtime")
    parser.add_argument("--json", help="check: write the rows here")
    args = parser.parse_args()
    if args.command == "build":
        import corpus

        python = corpus.ensure_venv(Path(args.venv) if args.venv else corpus.DEFAULT_VENV)
        subprocess.run([str(python), __file__, "_export", "--out", args.out], check=True)
    elif args.command == "_export":
        export_all(Path(args.out))
    else:
        check(args)


if __name__ == "__main__":
    main()

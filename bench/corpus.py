"""A corpus of real architectures (torchvision, timm, transformers, scikit-learn) as ONNX files.

`build` installs torch & co. into a bench-only venv and exports each model there with random
weights (fixed seed, opset 17, batch 1); `load_corpus` reads the index with numpy and onnx only.

    python3 bench/corpus.py build [--models resnet18,bert_base] [--venv DIR] [--out DIR]
    .venv/bin/python bench/corpus.py check [--models ...] [--json FILE]
    .venv/bin/python bench/corpus.py list
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
DEFAULT_VENV = BENCH / ".venv-corpus"
DEFAULT_OUT = BENCH / ".corpus"
INDEX = "index.json"
OPSET = 17
SEED = 0
SEQ = 128

# torch's CPU build for Python 3.11 lies in /opt/wheels (pip's find-links), and pip takes its
# local version 2.13.0+cpu over PyPI's CUDA build of 2.13.0. PyPI's torchvision is a CUDA build
# that needs torch==2.13.0 exactly; it goes in without dependencies, and its C extension (which
# links CUDA) fails to load beside the CPU torch: `torchvision_without_ops` works around that.
INSTALL_STEPS = (
    ("torch==2.13.0", "numpy", "pillow"),
    ("--no-deps", "torchvision==0.28.0"),
    ("transformers==5.24.0", "timm==1.0.31", "scikit-learn==1.9.1", "skl2onnx==1.20.0",
     "onnx==1.23.2", "onnxscript==0.7.2"),
)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input as the export feeds it: ints in [low, high), or all `fill`."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: int = 0
    high: int | None = None
    fill: float | None = None


@dataclass(frozen=True)
class ModelSpec:
    name: str
    group: str
    inputs: tuple[TensorSpec, ...]
    options: dict[str, Any] = field(default_factory=dict)


def _image(size: int = 224) -> tuple[TensorSpec, ...]:
    return (TensorSpec("input", (1, 3, size, size)),)


def _tokens(vocab: int, *, mask: bool = False, types: bool = False) -> tuple[TensorSpec, ...]:
    specs = [TensorSpec("input_ids", (1, SEQ), "int64", 0, vocab)]
    if mask:
        specs.append(TensorSpec("attention_mask", (1, SEQ), "int64", fill=1))
    if types:
        specs.append(TensorSpec("token_type_ids", (1, SEQ), "int64", fill=0))
    return tuple(specs)


def _rows(features: int = 10) -> tuple[TensorSpec, ...]:
    return (TensorSpec("X", (1, features)),)


# torchvision: name -> (submodule of torchvision.models, constructor kwargs, input)
TORCHVISION = {n: ("", {}, _image()) for n in (
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
    "shufflenet_v2_x1_0", "squeezenet1_1", "densenet121", "convnext_tiny", "regnet_y_400mf",
    "mnasnet1_0", "vgg11", "alexnet", "vit_b_16", "maxvit_t")}
TORCHVISION |= {
    "googlenet": ("", {"aux_logits": False, "init_weights": True}, _image()),
    "inception_v3": ("", {"aux_logits": False, "init_weights": True}, _image(299)),
    "r3d_18": ("video", {}, (TensorSpec("input", (1, 3, 16, 112, 112)),)),
    "deeplabv3_mobilenet_v3_large": ("segmentation", {"weights_backbone": None}, _image(520)),
}
# detection: a list of one image in, the first image's boxes, scores and labels out
DETECTION = {
    "ssdlite320_mobilenet_v3_large": ({}, 320),
    "retinanet_resnet50_fpn": ({"min_size": 512, "max_size": 512}, 512),
    "fasterrcnn_mobilenet_v3_large_320_fpn": ({}, 320),
}
TORCHVISION |= {n: ("detection", {"weights_backbone": None} | kw, _image(size))
                for n, (kw, size) in DETECTION.items()}
TIMM = {"resnet26d": 224, "mobilevit_xs": 256, "convmixer_768_32": 224, "efficientnet_lite0": 224}
# transformers: (model class, config class, config overrides, inputs)
TRANSFORMERS = {
    "bert_base": ("BertModel", "BertConfig", {}, _tokens(30522, mask=True, types=True)),
    "distilbert": ("DistilBertModel", "DistilBertConfig", {}, _tokens(30522, mask=True)),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", {}, _tokens(50257)),
    "vit_base": ("ViTModel", "ViTConfig", {}, (TensorSpec("pixel_values", (1, 3, 224, 224)),)),
    "t5_encoder": ("T5EncoderModel", "T5Config", {}, _tokens(32128, mask=True)),
    "llama_tiny": ("LlamaForCausalLM", "LlamaConfig",
                   {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000,
                    "max_position_embeddings": 2048}, _tokens(32000)),
    "mistral_tiny": ("MistralForCausalLM", "MistralConfig",
                     {"hidden_size": 512, "intermediate_size": 1792, "num_hidden_layers": 4,
                      "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000,
                      "sliding_window": 64}, _tokens(32000)),
    "qwen2_tiny": ("Qwen2ForCausalLM", "Qwen2Config",
                   {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
                    "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000},
                   _tokens(32000)),
}
SKLEARN = ("linear_regression", "logistic_regression", "random_forest_classifier",
           "gradient_boosting_regressor", "svc", "scaler_ridge_pipeline")


def model_specs() -> dict[str, ModelSpec]:
    specs = [ModelSpec(f"tv_{n}", "torchvision", inputs, {"module": m, "kwargs": kw})
             for n, (m, kw, inputs) in TORCHVISION.items()]
    specs += [ModelSpec(f"timm_{n}", "timm", _image(size)) for n, size in TIMM.items()]
    specs += [ModelSpec(n, "transformers", inputs, {"model": m, "config": c, "overrides": o})
              for n, (m, c, o, inputs) in TRANSFORMERS.items()]
    specs += [ModelSpec(f"skl_{n}", "sklearn", _rows()) for n in SKLEARN]
    return {s.name: s for s in specs}


# ---------------------------------------------------------------- reading the corpus (any venv)

def read_index(out: Path = DEFAULT_OUT) -> dict[str, dict]:
    path = Path(out) / INDEX
    return json.loads(path.read_text())["models"] if path.exists() else {}


def random_feeds(inputs: list[dict], seed: int = SEED) -> dict[str, Any]:
    """Feeds for an index entry's inputs: ints within their range (token ids within the vocab),
    a constant where the entry has `fill`, standard normal floats otherwise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in inputs:
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if spec.get("fill") is not None:
            feeds[spec["name"]] = np.full(shape, spec["fill"], dtype)
        elif dtype.kind in "iu":
            feeds[spec["name"]] = rng.integers(spec.get("low", 0), spec.get("high") or 2, shape,
                                               dtype=dtype)
        else:
            feeds[spec["name"]] = rng.standard_normal(shape).astype(dtype)
    return feeds


def load_corpus(names: list[str] | None = None, *, out: str | os.PathLike = DEFAULT_OUT,
                as_path: bool = False, seed: int = SEED) -> dict[str, tuple[Any, dict]]:
    """name -> (onnx.ModelProto, or its path with `as_path`, feeds of numpy arrays) for every
    exported model in the index (or those of `names` that are there), in index order."""
    import onnx

    index = read_index(Path(out))
    chosen = [n for n in index if names is None or n in names]
    result = {}
    for name in chosen:
        entry = index[name]
        path = Path(out) / entry["path"]
        model = str(path) if as_path else onnx.load(str(path))
        result[name] = (model, random_feeds(entry["inputs"], seed))
    return result


# ---------------------------------------------------------------- building the venv

def ensure_venv(venv: Path) -> Path:
    """Create `venv` and install the exporters into it, once: a stamp file records the steps."""
    python = venv / "bin" / "python"
    stamp = venv / "corpus-installed.json"
    wanted = json.dumps(INSTALL_STEPS)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        print(f"creating {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for step in INSTALL_STEPS:
        print("pip install " + " ".join(step), flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *step], check=True)
    probe = "import torch; print(torch.__version__, 'cuda', torch.version.cuda)"
    built = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    print("installed torch " + built.stdout.strip(), flush=True)
    stamp.write_text(wanted)
    return python


# ---------------------------------------------------------------- exporting (corpus venv only)

def torchvision_without_ops():
    """Import torchvision; where its C extension cannot load (a CUDA build beside the CPU torch),
    first define its operators that models call (nms, roi_align) with plain torch
    implementations, so that the models import and trace (their ONNX export maps the operators to
    NonMaxSuppression and RoiAlign, as with the C extension)."""
    import torch

    folder = importlib.util.find_spec("torchvision").submodule_search_locations[0]
    try:
        torch.ops.load_library(os.path.join(folder, "_C.so"))
        loaded = True
    except (OSError, RuntimeError):
        loaded = False
        library = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("roi_align(Tensor input, Tensor rois, float spatial_scale, "
                       "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
                       "bool aligned) -> Tensor")
        library.impl("nms", greedy_nms, "CPU")
        torchvision_without_ops.library = library  # registrations live as long as this object
    import torchvision

    if not loaded:
        from torchvision import extension

        roi_align = importlib.import_module("torchvision.ops.roi_align")  # the module

        torchvision_without_ops.library.impl("roi_align", roi_align._roi_align.__wrapped__, "CPU")
        extension._has_ops = roi_align._has_ops = ops_defined  # the ops above stand in
    return torchvision


def ops_defined() -> bool:
    """torchvision's `_has_ops` where the ops are defined here (a def: TorchScript compiles it)."""
    return True


def greedy_nms(boxes, scores, iou_threshold: float):
    """Non-maximum suppression in plain torch: the indices kept, by decreasing score."""
    import torch

    order = torch.argsort(scores, descending=True)
    boxes = boxes[order]
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        width = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        height = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = width * height
        suppressed |= inter / (areas[i] + areas - inter) > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)]


def example_tensors(spec: ModelSpec) -> tuple:
    import torch

    feeds = random_feeds([vars(t) | {"shape": list(t.shape)} for t in spec.inputs])
    return tuple(torch.from_numpy(feeds[t.name]) for t in spec.inputs)


def build_torch_model(spec: ModelSpec):
    import torch

    models = torchvision_without_ops().models  # timm and transformers import it too
    names = [t.name for t in spec.inputs]
    if spec.group == "torchvision":
        module = getattr(models, spec.options["module"]) if spec.options["module"] else models
        model = getattr(module, spec.name.removeprefix("tv_"))(weights=None,
                                                               **spec.options["kwargs"])
    elif spec.group == "timm":
        import timm

        model = timm.create_model(spec.name.removeprefix("timm_"), pretrained=False)
    else:
        import transformers

        config = getattr(transformers, spec.options["config"])(**spec.options["overrides"])
        config.use_cache = False
        config._attn_implementation = "eager"
        model = getattr(transformers, spec.options["model"])(config)

    class FirstOutput(torch.nn.Module):
        """The model's first output (a tensor, or the first of a tuple or dict) from positional
        inputs. A decoder fed token ids alone gets a mask of ones built in the graph, as
        transformers otherwise checks position ids for packed sequences (aten::diff)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            if spec.options.get("module") == "detection":
                out = self.model(list(tensors[0]))
            elif spec.group != "transformers":
                out = self.model(*tensors)
            else:
                feeds = dict(zip(names, tensors, strict=True))
                if "input_ids" in feeds and "attention_mask" not in feeds:
                    feeds["attention_mask"] = torch.ones_like(feeds["input_ids"])
                out = self.model(**feeds, return_dict=False)
            if spec.options.get("module") == "detection":
                return out[0]["boxes"], out[0]["scores"], out[0]["labels"]
            if isinstance(out, dict):
                out = next(iter(out.values()))
            return out[0] if isinstance(out, (tuple, list)) else out

    return FirstOutput()


def export_torch(spec: ModelSpec, path: Path) -> str:
    """Export with the TorchScript exporter, or the dynamo one where that fails; returns which."""
    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)  # its fused op has no TorchScript export
    model = build_torch_model(spec).eval()
    args = example_tensors(spec)
    names = [t.name for t in spec.inputs]
    outputs = ["boxes", "scores", "labels"] if spec.options.get("module") == "detection" else [
        "output"]
    with torch.no_grad():
        try:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET,
                              input_names=names, output_names=outputs)
            return "torchscript"
        except Exception as exc:  # the export, not the run, decides: try the other exporter
            print(f"torchscript exporter failed: {first_line(exc)}; trying dynamo", flush=True)
        program = torch.onnx.export(model, args, dynamo=True, opset_version=OPSET,
                                    input_names=names, output_names=outputs)
        program.save(str(path))
    return "dynamo"


def export_sklearn(spec: ModelSpec, path: Path) -> str:
    import numpy as np
    import onnx
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn import ensemble, linear_model, pipeline, preprocessing, svm

    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((500, spec.inputs[0].shape[1])).astype(np.float32)
    y_reg = x @ rng.standard_normal(x.shape[1]) + 0.1 * rng.standard_normal(len(x))
    y_cls = np.digitize(y_reg, np.quantile(y_reg, [1 / 3, 2 / 3]))
    kind = spec.name.removeprefix("skl_")
    estimator, y = {
        "linear_regression": (linear_model.LinearRegression(), y_reg),
        "logistic_regression": (linear_model.LogisticRegression(max_iter=500), y_cls),
        "random_forest_classifier": (ensemble.RandomForestClassifier(
            n_estimators=20, max_depth=6, random_state=SEED), y_cls),
        "gradient_boosting_regressor": (ensemble.GradientBoostingRegressor(
            n_estimators=100, max_depth=3, random_state=SEED), y_reg),
        "svc": (svm.SVC(random_state=SEED), y_cls),
        "scaler_ridge_pipeline": (pipeline.make_pipeline(
            preprocessing.StandardScaler(), linear_model.Ridge()), y_reg),
    }[kind]
    estimator.fit(x, y)
    # classifiers give tensors (no ZipMap to a list of dicts), as a benchmark feeds them on
    options = {"zipmap": False} if hasattr(estimator, "classes_") else None
    rows = [(spec.inputs[0].name, FloatTensorType(list(spec.inputs[0].shape)))]
    onx = to_onnx(estimator, initial_types=rows, options=options,
                  target_opset={"": OPSET, "ai.onnx.ml": 3})
    versions = {}  # skl2onnx may import a domain twice
    for opset in onx.opset_import:
        versions[opset.domain] = max(versions.get(opset.domain, 0), opset.version)
    del onx.opset_import[:]
    onx.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in versions.items())
    path.write_bytes(onx.SerializeToString())
    return "skl2onnx"


def index_entry(spec: ModelSpec, path: Path, exporter: str) -> dict:
    """The index's record of an exported file: its inputs as the graph declares them, with the
    value ranges of the spec."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    onnx.checker.check_model(str(path))
    declared = {t.name: t for t in spec.inputs}
    initializers = {i.name for i in model.graph.initializer}
    inputs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        spec_in = declared.get(value.name, TensorSpec(value.name, ()))
        shape = [d.dim_value for d in tensor.shape.dim]
        if not all(shape) and len(spec_in.shape) == len(shape):
            shape = list(spec_in.shape)  # a symbolic dimension: feed the exported size
        inputs.append({
            "name": value.name,
            "shape": shape,
            "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
            "low": spec_in.low, "high": spec_in.high, "fill": spec_in.fill,
        })
    return {"path": path.name, "group": spec.group, "inputs": inputs,
            "outputs": [o.name for o in model.graph.output], "opset": OPSET, "seed": SEED,
            "exporter": exporter, "bytes": path.stat().st_size}


def export_one(name: str, out: Path) -> None:
    """Export one model and write its index entry beside it (run in the corpus venv)."""
    spec = model_specs()[name]
    path = out / f"{name}.onnx"
    exporter = (export_sklearn if spec.group == "sklearn" else export_torch)(spec, path)
    (out / f"{name}.entry.json").write_text(json.dumps(index_entry(spec, path, exporter)))


def first_line(exc: BaseException | str) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


def write_index(out: Path, models: dict[str, dict]) -> None:
    tmp = out / (INDEX + ".tmp")
    tmp.write_text(json.dumps({"opset": OPSET, "seed": SEED, "models": models}, indent=1))
    tmp.replace(out / INDEX)


def build(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(Path(args.venv))
    specs = model_specs()
    names = args.models.split(",") if args.models else list(specs)
    index = read_index(out)
    failed = {}
    for name in names:
        if name not in specs:
            print(f"skip {name}: not in the corpus's list", flush=True)
            continue
        if name in index and (out / index[name]["path"]).exists():
            print(f"have {name}", flush=True)
            continue
        started = time.perf_counter()
        try:
            done = subprocess.run([str(python), __file__, "_export", name, "--out", str(out)],
                                  capture_output=True, text=True, timeout=args.timeout)
            reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        except subprocess.TimeoutExpired:
            done, reason = None, f"export took over {args.timeout} s"
        entry = out / f"{name}.entry.json"
        if done is not None and done.returncode == 0 and entry.exists():
            index[name] = json.loads(entry.read_text())
            entry.unlink()
            write_index(out, index)
            print(f"exported {name} ({index[name]['exporter']}, "
                  f"{index[name]['bytes'] / 1e6:.1f} MB, {time.perf_counter() - started:.0f} s)",
                  flush=True)
            for line in done.stdout.splitlines():
                if line.startswith("torchscript exporter failed"):
                    print("  " + line, flush=True)
        else:
            failed[name] = reason[:300]
            (out / f"{name}.onnx").unlink(missing_ok=True)
            print(f"skip {name}: {reason[:300]}", flush=True)
    write_index(out, index)
    print(f"{len(index)} models in {out / INDEX}; {len(failed)} failed this run", flush=True)


# ---------------------------------------------------------------- checking (main venv)

def check_one(name: str, out: Path) -> dict:
    """Run one model on onnxruntime and on ep-host's CPU EP; compare within 1e-3 of scale."""
    import numpy as np
    import onnxruntime

    from ep_host import InferenceSession

    model, feeds = load_corpus([name], out=out, as_path=True)[name]
    result: dict[str, Any] = {"name": name}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        expected = onnxruntime.InferenceSession(model, options, providers=[
            "CPUExecutionProvider"]).run(None, feeds)
        result["ort"] = "ok"
    except Exception as exc:
        result["ort"] = f"error: {first_line(exc)}"
        return result
    try:
        got = InferenceSession(model, providers=["cpu"]).run(None, feeds)
    except Exception as exc:
        lines = str(exc).strip().splitlines()  # a PlacementError names the nodes on line 2
        result["ep_host"] = f"{type(exc).__name__}: " + " ".join(
            line.strip() for line in lines[:2])[:300]
        return result
    worst = 0.0
    for want, have in zip(expected, got, strict=True):
        want, have = np.asarray(want), np.asarray(have)
        if want.shape != have.shape:
            result["ep_host"] = f"shape {have.shape} != {want.shape}"
            return result
        if want.size == 0:
            continue
        scale = max(float(np.max(np.abs(want.astype(np.float64)))), 1e-6)
        diff = np.max(np.abs(want.astype(np.float64) - have.astype(np.float64)))
        worst = max(worst, float(diff) / scale)
    result["rel_err"] = worst
    result["ep_host"] = "match" if worst <= 1e-3 else f"mismatch (rel err {worst:.2e})"
    return result


def check(args: argparse.Namespace) -> None:
    out = Path(args.out)
    index = read_index(out)
    names = [n for n in index if not args.models or n in args.models.split(",")]
    rows = []
    for name in names:
        try:
            done = subprocess.run([sys.executable, __file__, "_check", name, "--out", str(out)],
                                  capture_output=True, text=True, timeout=args.timeout)
            lines = done.stdout.strip().splitlines()
            if done.returncode == 0 and lines:
                row = json.loads(lines[-1])
            else:
                tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
                row = {"name": name, "ep_host": f"crashed: {tail[:200]}"}
        except subprocess.TimeoutExpired:
            row = {"name": name, "ep_host": f"over {args.timeout} s"}
        row["group"], row["mb"] = index[name]["group"], index[name]["bytes"] / 1e6
        rows.append(row)
        print(f"{name:34} {row['group']:12} {row['mb']:7.1f} MB  ort {row.get('ort', '-'):4} "
              f" ep-host {row.get('ep_host', '-')}", flush=True)
    matched = sum(r.get("ep_host") == "match" for r in rows)
    print(f"{matched}/{len(rows)} match onnxruntime within 1e-3 of scale")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "check", "list", "_export", "_check"])
    parser.add_argument("name", nargs="?", help="the model (_export and _check only)")
    parser.add_argument("--models", help="comma-separated subset")
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="bench-only venv for torch")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where the ONNX files go")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    parser.add_argument("--json", help="check: write the rows here")
    args = parser.parse_args()
    if args.command == "build":
        build(args)
    elif args.command == "check":
        check(args)
    elif args.command == "list":
        index = read_index(Path(args.out))
        for name, spec in model_specs().items():
            entry = index.get(name)
            state = f"{entry['bytes'] / 1e6:.1f} MB" if entry else "not exported"
            print(f"{name:34} {spec.group:12} {state}")
    elif args.command == "_export":
        export_one(args.name, Path(args.out))
    else:
        print(json.dumps(check_one(args.name, Path(args.out))))


if __name__ == "__main__":
    main()

"""explain on a model with over 1 GB of external weights reads none of them."""

import json
import os
import subprocess
import sys

import onnx
from onnx import TensorProto, helper

WEIGHT_SHAPE = (8192, 8192)  # 256 MiB of float32 each


def _model_with_external_weights(folder, layers=5):
    nbytes = WEIGHT_SHAPE[0] * WEIGHT_SHAPE[1] * 4
    inits, nodes, x = [], [], "x"
    for i in range(layers):
        t = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=WEIGHT_SHAPE)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "weights.bin"), ("offset", str(i * nbytes)),
                           ("length", str(nbytes))):
            t.external_data.add(key=key, value=value)
        inits.append(t)
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WEIGHT_SHAPE[0]])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "big.onnx"
    path.write_bytes(model.SerializeToString())
    with open(folder / "weights.bin", "wb") as f:  # sparse: no disk blocks are written
        f.truncate(layers * nbytes)
    return path, layers * nbytes


# VmHWM, not getrusage: ru_maxrss survives exec, so a child forked from a big pytest process
# would report the parent's size.
PEAK_RSS = """
import sys
from ep_host.cli import main
code = main(["explain", sys.argv[1], "--json"])
sys.stdout.flush()
with open("/proc/self/status") as f:
    peak = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
print("PEAK_KIB", peak, file=sys.stderr)
sys.exit(code)
"""


def test_explain_peak_rss_stays_under_300_mb(tmp_path):
    path, weight_bytes = _model_with_external_weights(tmp_path)
    assert weight_bytes > 1_000_000_000
    result = subprocess.run([sys.executable, "-c", PEAK_RSS, str(path)], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, EP_HOST_PROVIDERS="cpu"))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {n["provider"] for n in data["nodes"]} == {"cpu"}
    peak_kib = int(result.stderr.split("PEAK_KIB")[1].split()[0])
    assert peak_kib < 300 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"

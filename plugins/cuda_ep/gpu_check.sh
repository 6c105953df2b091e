#!/usr/bin/env bash
# The CUDA EP's check on a machine with an NVIDIA GPU and no network. Needs Python with CuPy,
# numpy, onnx, onnxruntime, pluggy and setuptools installed (torch optional). About 5 minutes:
#   1. installs ep-host and both EPs in place (no dependencies fetched),
#   2. runs the GPU tests (pytest -m gpu plugins/cuda_ep/tests),
#   3. runs plugins/cuda_ep/gpu_bench.py: the nine light models, a BERT-base-like encoder and a
#      GPT-2-like decoder on the CUDA EP against the CPU EP (max |diff| <= 1e-3), latencies, the
#      encoder in torch eager where torch has CUDA, and a run with CUDA graphs on.
# Usage: bash plugins/cuda_ep/gpu_check.sh   (PYTHON=/path/to/python to choose the interpreter)
set -u
cd "$(dirname "$0")/../.." || exit 2
PY="${PYTHON:-python}"
started=$(date +%s)

echo "== install (pip install --no-deps --no-build-isolation -e . -e plugins/cpu_ep -e plugins/cuda_ep)"
timeout 90 "$PY" -m pip install -q --no-deps --no-build-isolation \
    -e . -e plugins/cpu_ep -e plugins/cuda_ep || { echo "install failed"; exit 2; }

echo "== device"
timeout 60 "$PY" -c "
import cupy
n = cupy.cuda.runtime.getDeviceCount()
name = cupy.cuda.runtime.getDeviceProperties(0)['name']
print('cupy', cupy.__version__, '|', n, 'device(s) |', name.decode() if isinstance(name, bytes) else name)
" || { echo "CuPy or the device is not usable here"; exit 2; }
timeout 60 "$PY" -m ep_host providers

echo "== GPU tests (pytest -m gpu plugins/cuda_ep/tests)"
timeout 120 "$PY" -m pytest -m gpu plugins/cuda_ep/tests -q -rs -p no:cacheprovider
tests=$?

echo "== models on the CUDA EP against the CPU EP (plugins/cuda_ep/gpu_bench.py)"
left=$(( 285 - ($(date +%s) - started) )); [ "$left" -lt 30 ] && left=30
budget=$(( left > 60 ? left - 40 : 20 ))
timeout "$left" "$PY" plugins/cuda_ep/gpu_bench.py --repeat 20 --budget-s "$budget"
bench=$?

echo "== summary: gpu tests exit $tests, bench exit $bench, $(( $(date +%s) - started )) s"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]

"""Heap allocations per run of a model on the CPU EP: every malloc, calloc and realloc the
process makes during one ``session.run`` (after two warm-up runs), counted by a small
LD_PRELOAD library compiled here with the system's C compiler, and how many of them are large.

    .venv/bin/python bench/run_allocations.py [--models tv_resnet50,...] [--runs 5]

Run it against two checkouts (PYTHONPATH) to compare them; the corpus is read from bench/.corpus
(``EP_HOST_CORPUS`` names another folder).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
CORPUS = Path(os.environ.get("EP_HOST_CORPUS", BENCH / ".corpus"))
LARGE = 64 << 10  # bytes from which an allocation counts as large (array data, not objects)

COUNTER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static char bootstrap[4096];
static int looking_up;
volatile long counting, all_count, large_count;
static void count(size_t n) {
    if (counting) { all_count++; if (n >= %(large)d) large_count++; }
}
void *malloc(size_t n) {
    if (!real_malloc) real_malloc = dlsym(RTLD_NEXT, "malloc");
    count(n);
    return real_malloc(n);
}
void *calloc(size_t k, size_t n) {
    if (!real_calloc) {
        if (looking_up) { memset(bootstrap, 0, sizeof bootstrap); return bootstrap; }
        looking_up = 1;
        real_calloc = dlsym(RTLD_NEXT, "calloc");
        looking_up = 0;
    }
    count(k * n);
    return real_calloc(k, n);
}
void *realloc(void *p, size_t n) {
    if (!real_realloc) real_realloc = dlsym(RTLD_NEXT, "realloc");
    count(n);
    return real_realloc(p, n);
}
"""


def build_counter(folder: str) -> str:
    source = Path(folder) / "counter.c"
    source.write_text(COUNTER % {"large": LARGE})
    library = Path(folder) / "counter.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"],
                   check=True)
    return str(library)


def measure(path: str, runs: int) -> dict[str, float]:
    """In this process (started with the counter preloaded): allocations per run of ``path``."""
    import numpy as np

    from ep_host import InferenceSession

    lib = ctypes.CDLL(None)
    counting = ctypes.c_long.in_dll(lib, "counting")
    all_count = ctypes.c_long.in_dll(lib, "all_count")
    large_count = ctypes.c_long.in_dll(lib, "large_count")
    session = InferenceSession(path, providers=["cpu"])
    rng = np.random.default_rng(0)
    feed = {}
    for arg in session.get_inputs():
        shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
        feed[arg.name] = (rng.standard_normal(shape).astype(np.float32) if "float" in arg.type
                          else rng.integers(0, 2, shape).astype(np.int64))
    for _ in range(2):
        session.run(None, feed)
    counting.value = 1
    for _ in range(runs):
        session.run(None, feed)
    counting.value = 0
    return {"all": all_count.value / runs, "large": large_count.value / runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tv_resnet50,tv_resnet18,tv_alexnet")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's model
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.runs)))
        return
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, LD_PRELOAD=build_counter(folder))
        print(f"{'model':<16} {'allocations/run':>16} {'of >= 64 KiB':>13}")
        for model in args.models.split(","):
            done = subprocess.run(
                [sys.executable, __file__, "--runs", str(args.runs), "--one",
                 str(CORPUS / f"{model}.onnx")],
                capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                print(f"{model:<16} failed: {done.stderr.strip()[-300:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{model:<16} {r['all']:16.1f} {r['large']:13.1f}", flush=True)


if __name__ == "__main__":
    main()

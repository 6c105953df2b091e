"""Peak memory of sessions with and without shared prepacked constants, each case in a fresh
process: one session, two sessions, two sessions with ``share_prepacked=True``.

    .venv/bin/python bench/prepacked_memory.py [--models bert_base,tv_resnet50] [--runs 1]

The corpus is read from bench/.corpus (``EP_HOST_CORPUS`` names another folder).

Prints, per model and case, the process's peak RSS (the kernel's high-water mark), its RSS after
the sessions ran (psutil), and that RSS once the C heap gave back its free pages (malloc_trim:
loading's transient copies otherwise stay in the heap), in MiB; and whether every session's
outputs were equal bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
CORPUS = Path(os.environ.get("EP_HOST_CORPUS", BENCH / ".corpus"))  # bench/corpus.py's output
CASES = (("one", 1, False), ("two", 2, False), ("two shared", 2, True))


def measure(path: str, sessions: int, shared: bool, runs: int) -> dict[str, float]:
    """In this process: create ``sessions`` sessions of ``path``, run each ``runs`` times on
    random inputs, and return peak and current RSS in MiB."""
    import resource

    import numpy as np
    import psutil

    from ep_host import InferenceSession
    from ep_host.held_weights import return_freed_memory

    before = psutil.Process().memory_info().rss
    kwargs = {"share_prepacked": True} if shared else {}
    held = [InferenceSession(path, providers=["cpu"], **kwargs) for _ in range(sessions)]
    rng = np.random.default_rng(0)
    feed = {}
    for arg in held[0].get_inputs():  # ids 0/1 are valid for every embedding of the corpus
        shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
        feed[arg.name] = (rng.standard_normal(shape).astype(np.float32) if "float" in arg.type
                          else rng.integers(0, 2, shape).astype(np.int64))
    outputs = []
    for session in held:
        for _ in range(runs):
            out = session.run(None, feed)
        outputs.append(out)
    same = all(all(np.array_equal(a, b) for a, b in zip(outputs[0], o, strict=True))
               for o in outputs[1:])
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss = psutil.Process().memory_info().rss
    return_freed_memory()  # what the heap keeps of freed blocks (loading's transient copies)
    return {"peak_mib": peak_kib / 1024, "rss_mib": rss / 2**20,
            "trimmed_mib": psutil.Process().memory_info().rss / 2**20,
            "start_mib": before / 2**20, "outputs_equal": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert_base,tv_resnet50")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--one", nargs=3, metavar=("PATH", "SESSIONS", "SHARED"),
                        help=argparse.SUPPRESS)  # the child process's case
    args = parser.parse_args()
    if args.one:
        path, sessions, shared = args.one
        print(json.dumps(measure(path, int(sessions), shared == "1", args.runs)))
        return
    print(f"{'model':<14} {'case':<11} {'peak MiB':>9} {'RSS MiB':>8} {'trimmed':>8} "
          f"{'equal':>6}")
    for model in args.models.split(","):
        path = str(CORPUS / f"{model}.onnx")
        for label, sessions, shared in CASES:
            done = subprocess.run(
                [sys.executable, __file__, "--runs", str(args.runs), "--one", path,
                 str(sessions), "1" if shared else "0"],
                capture_output=True, text=True, env=os.environ, check=False)
            if done.returncode != 0:
                print(f"{model:<14} {label:<11} failed: {done.stderr.strip()[-300:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{model:<14} {label:<11} {r['peak_mib']:9.0f} {r['rss_mib']:8.0f} "
                  f"{r['trimmed_mib']:8.0f} {r['outputs_equal']!s:>6}", flush=True)


if __name__ == "__main__":
    main()

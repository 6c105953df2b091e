"""One session run from several threads gives the results of runs one at a time."""

import os
import threading

import numpy as np
from hostkit import InlineProvider, add_relu_model

from ep_host import FunctionKernel, InferenceSession, Kernel, hookimpl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")


def test_eight_threads_times_300_runs_match_single_threaded_results():
    session = InferenceSession(CNN, ["cpu"])
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(16)]
    expected = [session.run(None, {"image": x})[0] for x in inputs]
    failures = []

    def worker(seed):
        order = np.random.default_rng(seed).integers(0, len(inputs), 300)
        for i in order:
            (out,) = session.run(None, {"image": inputs[i]})
            if not np.array_equal(out, expected[i]):
                failures.append((seed, int(i)))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_kernels_that_are_not_thread_safe_are_serialised(host, tensors):
    inside = []
    overlaps = []

    class Stateful(Kernel):
        thread_safe = False

        def run(self, x, y):
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            out = np.add(x, y)
            for _ in range(200):  # give other threads a chance to collide
                out = out + 0
            inside.pop()
            return (out,)

    class Provider(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Add":
                return Stateful()
            return FunctionKernel(self.FUNCS[node.op_type])

    host.register(Provider("cpu"), name="cpu")
    session = InferenceSession(add_relu_model().SerializeToString(), ["cpu"], host=host)

    def worker():
        for _ in range(100):
            session.run(None, {"x": tensors.x, "y": tensors.y})

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []

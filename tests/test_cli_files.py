"""The CLI's own files: input files whose external data is confined to their folder, files that
are not what they claim, output paths that cannot be written, and onnxruntime's crash during
``--compare-onnxruntime``: clean errors naming the argument, never a traceback."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from hostkit import make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host.cli_run import output_file_name

SECRET = np.array([7.0, 8.0, 9.0], np.float32)
VALUES = np.array([1.0, -2.0, 3.0], np.float32)


def ep_host(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=cwd)


def assert_clean_error(result, *needles, code=1):
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.fixture
def relu_model(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])])
    path = tmp_path / "relu.onnx"
    onnx.save(model, path)
    return str(path)


def external_tensor_file(path, location):
    """A TensorProto .pb file for ``x`` (float32 [3]) whose 12 bytes lie at ``location``."""
    tensor = numpy_helper.from_array(VALUES, "x")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "12")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tensor.SerializeToString())
    return str(path)


@pytest.fixture
def secret(tmp_path):
    """A file outside the input folder, holding bytes an attacker wants read."""
    (tmp_path / "secret.txt").write_bytes(SECRET.tobytes())
    return tmp_path / "secret.txt"


# ---------------------------------------------------------------------------------------------
# external data of an input file
# ---------------------------------------------------------------------------------------------


def test_external_data_is_read_from_the_input_files_folder_not_the_current_one(
        tmp_path, relu_model):
    inputs = tmp_path / "inputs"
    pb = external_tensor_file(inputs / "x.pb", "x.bin")
    (inputs / "x.bin").write_bytes(VALUES.tobytes())
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    (elsewhere / "x.bin").write_bytes(SECRET.tobytes())  # what the old code read
    result = ep_host("run", relu_model, "--input", f"x={pb}", "--output-dir",
                     str(tmp_path / "out"), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), np.maximum(VALUES, 0))


@pytest.mark.parametrize("location", ["../secret.txt", "sub/../../secret.txt"])
def test_external_data_outside_the_input_folder_is_refused(tmp_path, relu_model, secret,
                                                            location):
    pb = external_tensor_file(tmp_path / "inputs" / "x.pb", location)
    result = ep_host("run", relu_model, "--input", f"x={pb}", cwd=tmp_path / "inputs")
    assert_clean_error(result, f"--input x={pb}", location, "outside")
    assert "Outputs" not in result.stdout


def test_an_absolute_external_data_path_is_refused(tmp_path, relu_model, secret):
    pb = external_tensor_file(tmp_path / "inputs" / "x.pb", str(secret))
    result = ep_host("run", relu_model, "--input", f"x={pb}")
    assert_clean_error(result, f"--input x={pb}", "only paths relative")
    assert "Outputs" not in result.stdout


def test_a_symlink_out_of_the_input_folder_is_refused(tmp_path, relu_model, secret):
    pb = external_tensor_file(tmp_path / "inputs" / "x.pb", "x.bin")
    os.symlink(secret, tmp_path / "inputs" / "x.bin")
    result = ep_host("run", relu_model, "--input", f"x={pb}")
    assert_clean_error(result, f"--input x={pb}", "'x.bin'", "outside")
    assert "Outputs" not in result.stdout


def test_missing_or_short_external_data_is_a_clean_error(tmp_path, relu_model):
    pb = external_tensor_file(tmp_path / "inputs" / "x.pb", "x.bin")
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={pb}"), "does not exist")
    (tmp_path / "inputs" / "x.bin").write_bytes(b"\0" * 4)
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={pb}"), "which has 4")


# ---------------------------------------------------------------------------------------------
# input files that are not what they claim
# ---------------------------------------------------------------------------------------------


def test_a_pb_that_is_not_a_tensor_proto_is_a_clean_error(tmp_path, relu_model):
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={garbage}"),
                       f"--input x={garbage}", "not a TensorProto")
    # a whole model parses as protobuf but is no tensor
    model_as_pb = tmp_path / "model.pb"
    model_as_pb.write_bytes(open(relu_model, "rb").read())
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={model_as_pb}"),
                       f"--input x={model_as_pb}", "not a TensorProto")


def test_a_tensor_whose_data_does_not_fit_its_shape_is_a_clean_error(tmp_path, relu_model):
    tensor = numpy_helper.from_array(VALUES, "x")
    tensor.dims[:] = [1000]
    (tmp_path / "short.pb").write_bytes(tensor.SerializeToString())
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={tmp_path / 'short.pb'}"),
                       "--input x=", "does not match its type and shape")


@pytest.mark.parametrize("content", [b"", b"not numpy at all", b"\x93NUMPY\x01\x00garbage"])
def test_an_unreadable_npy_is_a_clean_error(tmp_path, relu_model, content):
    bad = tmp_path / "x.npy"
    bad.write_bytes(content)
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={bad}"),
                       f"--input x={bad}", "cannot read the file")


def test_an_npz_archive_or_a_folder_is_a_clean_error(tmp_path, relu_model):
    np.savez(tmp_path / "x.npz", x=VALUES)
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={tmp_path / 'x.npz'}"),
                       "several arrays")
    assert_clean_error(ep_host("run", relu_model, "--input", f"x={tmp_path}"),
                       f"--input x={tmp_path}", "cannot read the file")


# ---------------------------------------------------------------------------------------------
# output paths
# ---------------------------------------------------------------------------------------------


def test_output_dir_naming_a_file_is_an_argument_error(tmp_path, relu_model):
    a_file = tmp_path / "taken"
    a_file.write_text("not a folder")
    result = ep_host("run", relu_model, "--random-inputs", "--output-dir", str(a_file))
    assert_clean_error(result, "argument --output-dir", "is not a folder", code=2)
    result = ep_host("run", relu_model, "--random-inputs", "--output-dir",
                     str(a_file / "sub"))
    assert_clean_error(result, "--output-dir", code=1)
    assert a_file.read_text() == "not a folder"


@pytest.mark.parametrize("args", [
    ["run", "{model}", "--random-inputs", "--trace", "{missing}/trace.json"],
    ["report", "{model}", "-o", "{missing}/report.html"],
    ["place", "{model}", "-o", "{missing}/placement.json"],
    ["place", "{model}", "--output", "{folder}"],
    ["run", "{model}", "--random-inputs", "--trace", "{folder}"],
])
def test_an_output_file_that_cannot_be_written_is_an_argument_error(tmp_path, relu_model,
                                                                    args):
    filled = [a.format(model=relu_model, missing=tmp_path / "no" / "such",
                       folder=tmp_path) for a in args]
    result = ep_host(*filled)
    flag = next(a for a in args if a.startswith("-") and a != "--random-inputs")
    assert_clean_error(result, f"argument {flag}" if flag not in ("-o", "--output")
                       else "argument -o/--output",
                       code=2)
    assert not (tmp_path / "no").exists()


def test_outputs_whose_file_names_collide_are_all_saved(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["a/b"], name="r1"),
                        helper.make_node("Neg", ["x"], ["a_b"], name="r2"),
                        helper.make_node("Abs", ["x"], [".."], name="r3")],
                       [("x", TensorProto.FLOAT, [3])],
                       [("a/b", TensorProto.FLOAT, [3]), ("a_b", TensorProto.FLOAT, [3]),
                        ("..", TensorProto.FLOAT, [3])])
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", VALUES)
    result = ep_host("run", str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}",
                     "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    saved = sorted(os.listdir(tmp_path / "out"))
    assert len(saved) == 3 and all(not name.startswith(".") for name in saved)
    values = {name: np.load(tmp_path / "out" / name) for name in saved}
    np.testing.assert_array_equal(values["a_b.npy"], np.maximum(VALUES, 0))  # the first, a/b
    np.testing.assert_array_equal(values["a_b_2.npy"], -VALUES)
    assert "saved as a_b_2.npy" in result.stderr


def test_output_file_names_stay_inside_the_folder():
    taken = set()
    names = [output_file_name(n, taken) for n in ("../../etc/passwd", "..", "", "/abs", "é")]
    assert all("/" not in n and not n.startswith(".") for n in names)
    assert len(set(names)) == len(names)


# ---------------------------------------------------------------------------------------------
# onnxruntime in a child process
# ---------------------------------------------------------------------------------------------


def test_onnxruntime_crashing_fails_the_comparison_and_keeps_ep_hosts_result(tmp_path):
    """onnxruntime dies with SIGFPE dividing int32 INT32_MIN by -1 (x86's idiv traps)."""
    model = make_model([helper.make_node("Div", ["a", "b"], ["q"], name="div")],
                       [("a", TensorProto.INT32, [2]), ("b", TensorProto.INT32, [2])],
                       [("q", TensorProto.INT32, [2])])
    onnx.save(model, tmp_path / "div.onnx")
    np.save(tmp_path / "a.npy", np.array([np.iinfo(np.int32).min, 7], np.int32))
    np.save(tmp_path / "b.npy", np.array([-1, 2], np.int32))
    result = ep_host("run", str(tmp_path / "div.onnx"), "--input", f"a={tmp_path / 'a.npy'}",
                     "--input", f"b={tmp_path / 'b.npy'}", "--compare-onnxruntime",
                     "--providers", "cpu")
    assert_clean_error(result, "--compare-onnxruntime", "onnxruntime crashed", "SIGFPE")
    assert "Outputs" in result.stdout and "q" in result.stdout and "int32" in result.stdout


def test_onnxruntime_refusing_the_model_fails_the_comparison_cleanly():
    """The example EP runs the custom op FastSwish; onnxruntime does not know it."""
    custom = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "examples", "custom_op.onnx")
    result = ep_host("run", custom, "--random-inputs", "--compare-onnxruntime",
                     "--providers", "example,cpu")
    assert_clean_error(result, "--compare-onnxruntime: onnxruntime could not run", "FastSwish")
    assert "Outputs" in result.stdout and "float32" in result.stdout

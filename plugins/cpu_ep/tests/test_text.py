"""String ops (StringSplit, StringConcat, StringNormalizer, RegexFullMatch, TfIdfVectorizer)
and ImageDecoder on the CPU EP."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from cpukit import cpu_answer, make_model, run_ep_host, run_onnxruntime
from onnx import TensorProto, helper

S, I64, F = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT


def strings(*values):
    return np.array(values, dtype=object)


def string_model(op, n_inputs=1, outputs=(("y", S),), opset=20, **attrs):
    names = ["x", "z"][:n_inputs]
    node = helper.make_node(op, names, [n for n, _ in outputs], **attrs)
    return make_model([node], [(n, S, None) for n in names],
                      [(n, t, None) for n, t in outputs], opset=opset)


def assert_same(model, feeds):
    ours, theirs = run_ep_host(model, feeds), run_onnxruntime(model, feeds)
    for a, b in zip(ours, theirs, strict=True):
        assert np.asarray(a).shape == np.asarray(b).shape
        assert np.asarray(a).tolist() == np.asarray(b).tolist()
    return ours


# -- StringSplit, StringConcat, StringNormalizer ----------------------------------------------


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "-"}, {"delimiter": "ab"},
                                   {"maxsplit": 1}, {"delimiter": "-", "maxsplit": 2},
                                   {"maxsplit": 0}])
def test_string_split_matches_onnxruntime(attrs):
    model = string_model("StringSplit", outputs=(("y", S), ("n", I64)), **attrs)
    x = strings(["a-b--c-", "  one  two three  "], ["xaby", "-"])
    assert_same(model, {"x": x})


def test_string_split_empty_string():
    # an empty string holds one empty substring with a delimiter (as Python's str.split and
    # onnx's reference have it; onnxruntime counts 0) and none without
    model = string_model("StringSplit", outputs=(("y", S), ("n", I64)), delimiter="-")
    assert run_ep_host(model, {"x": strings("")})[1].tolist() == [1]
    model = string_model("StringSplit", outputs=(("y", S), ("n", I64)))
    assert run_ep_host(model, {"x": strings("", " ")})[1].tolist() == [0, 0]


def test_string_split_on_ascii_whitespace():
    model = string_model("StringSplit", outputs=(("y", S), ("n", I64)), maxsplit=1)
    y, n = run_ep_host(model, {"x": strings("\ta \n b\tc\r\n")})
    assert y.tolist() == [["a", "b\tc"]] and n.tolist() == [2]


def test_string_concat_broadcasts():
    model = string_model("StringConcat", n_inputs=2)
    assert_same(model, {"x": strings(["a", "bé"], ["", "c"]), "z": strings("-x", "中")})


@pytest.mark.parametrize("attrs, expected", [
    ({"stopwords": ["Monday"], "is_case_sensitive": 1}, ["monday", "Tuesday", "MONDAY", "Stop"]),
    ({"stopwords": ["MONDAY"], "is_case_sensitive": 1}, ["monday", "Tuesday", "Stop"]),
    ({"stopwords": ["monday"]}, ["Tuesday", "Stop"]),
    ({"stopwords": ["monday", "stop"], "case_change_action": "UPPER"}, ["TUESDAY"]),
    ({"case_change_action": "LOWER"}, ["monday", "tuesday", "monday", "stop"]),
    ({"stopwords": ["monday", "tuesday", "stop"]}, [""]),
])
def test_string_normalizer(attrs, expected):
    # onnxruntime needs an installed en_US.UTF-8 locale for this op; compare with the spec.
    model = string_model("StringNormalizer", opset=10, **attrs)
    (y,) = run_ep_host(model, {"x": strings(["monday", "Tuesday", "MONDAY", "Stop"])})
    assert y.tolist() == [expected]


def test_string_normalizer_declines_other_locales():
    answer = cpu_answer(string_model("StringNormalizer", opset=10, locale="tr_TR.UTF-8"))
    assert not answer.is_supported and answer.code == "attribute"
    assert "tr_TR" in answer.reason


# -- RegexFullMatch ---------------------------------------------------------------------------

WORDS = strings("abc", "ABC", "a1_", "é", "a b", "a\tb", "a\x0bb", "x{,2}", "xx", "A", "ab\n",
                "ab", "foo.com", "www.foo.co", "12", "Kx", "ǅ")


@pytest.mark.parametrize("pattern", [
    r"\w+", r"\W", r"\d+", r"[\d\s]+", r"a\sb", r"[^\w]", r"a.b", r"x{,2}", r"x{2}", r"ab$",
    r"(?i)abc", r"(?i)[a-c]+", r"(?i:A)b?c?", r"(?P<w>a)b", r"(a|b)+\b.*", r"[[]",
    r"\x{41}", r"\x41", r"[\]a]+", r"(?s)a.*", r"\Aab\z", r"", r"www\.[\w.-]+\.\bcom\b",
])
def test_regex_full_match_matches_re2(pattern):
    model = string_model("RegexFullMatch", outputs=(("y", TensorProto.BOOL),), pattern=pattern)
    assert_same(model, {"x": WORDS})


@pytest.mark.parametrize("pattern, why", [
    (r"a(?=b)", "lookaround"), (r"(a)\1", "escape \\1"), (r"\pL+", "escape \\p"),
    (r"[[:alpha:]]", "POSIX"), (r"a*+", "possessive"), (r"a(?i)b", "middle of a pattern"),
    (r"(?U)a+", "ungreedy"), (r"\Qa.b\E", "escape \\Q"), (r"\Z", "escape \\Z"),
    (r"(?i)\bab", "case-insensitive"), (r"a{1001}", "1000"),
])
def test_regex_full_match_declines_what_re_reads_differently(pattern, why):
    model = string_model("RegexFullMatch", outputs=(("y", TensorProto.BOOL),), pattern=pattern)
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
    assert why in answer.reason, answer.reason


# -- TfIdfVectorizer --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("skip", [0, 2])
@pytest.mark.parametrize("lengths", [(1, 1), (1, 3), (2, 3)])
def test_tfidf_int_pool(mode, skip, lengths):
    node = helper.make_node(
        "TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lengths[0],
        max_gram_length=lengths[1], max_skip_count=skip, ngram_counts=[0, 4, 8],
        ngram_indexes=[6, 5, 4, 3, 2, 1, 0, 7], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 8,
                                                           6, 7, 5],
        weights=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0])
    model = make_model([node], [("x", TensorProto.INT32, [2, 8])], [("y", F, None)], opset=9)
    x = np.array([[1, 3, 5, 6, 7, 8, 6, 7], [5, 6, 5, 4, 3, 2, 8, 6]], np.int32)
    ours, theirs = run_ep_host(model, {"x": x}), run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(ours[0], theirs[0])


def test_tfidf_string_pool_1d():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1,
                            max_gram_length=2, max_skip_count=1, ngram_counts=[0, 2],
                            ngram_indexes=[0, 1, 2], pool_strings=["a", "b", "a", "c"])
    model = make_model([node], [("x", S, [6])], [("y", F, None)], opset=9)
    x = strings("a", "b", "c", "a", "x", "c")
    ours, theirs = run_ep_host(model, {"x": x}), run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(ours[0], theirs[0])


def test_tfidf_declines_a_pool_that_does_not_split_into_ngrams():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1,
                            max_gram_length=2, max_skip_count=0, ngram_counts=[0, 2],
                            ngram_indexes=[0, 1, 2], pool_int64s=[1, 2, 3, 4, 5])
    model = make_model([node], [("x", I64, [6])], [("y", F, None)], opset=9)
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
    assert "whole 2-grams" in answer.reason


# -- ImageDecoder -----------------------------------------------------------------------------


def test_image_decoder_declines_without_pillow(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "PIL" else real(name, *a))
    node = helper.make_node("ImageDecoder", ["x"], ["y"])
    model = make_model([node], [("x", TensorProto.UINT8, [10])], [("y", TensorProto.UINT8,
                                                                   None)], opset=20)
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "op"
    assert "Pillow" in answer.reason


def image_model(pixel_format):
    node = helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=pixel_format)
    return make_model([node], [("x", TensorProto.UINT8, [None])],
                      [("y", TensorProto.UINT8, None)], opset=20)


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_image_decoder_with_pillow(rng, pixel_format):
    import io

    from PIL import Image as image_module  # a test dependency

    pixels = rng.integers(0, 256, [6, 7, 3]).astype(np.uint8)
    buffer = io.BytesIO()
    image_module.fromarray(pixels).save(buffer, format="PNG")
    encoded = np.frombuffer(buffer.getvalue(), dtype=np.uint8)
    (y,) = run_ep_host(image_model(pixel_format), {"x": encoded})
    if pixel_format == "Grayscale":
        gray = np.asarray(image_module.fromarray(pixels).convert("L"))
        np.testing.assert_array_equal(y, gray[:, :, None])
    else:
        np.testing.assert_array_equal(y, pixels if pixel_format == "RGB" else pixels[:, :, ::-1])


def test_image_decoder_returns_empty_for_undecodable_data():
    pytest.importorskip("PIL.Image")
    (y,) = run_ep_host(image_model("RGB"), {"x": np.arange(20, dtype=np.uint8)})
    assert y.shape == (0, 0, 3) and y.dtype == np.uint8

"""AnswerStore: records kept on disk by key, read by the next process, robust to damage."""

import os

from ep_host.stored import AnswerStore, key_digest


def test_a_record_written_by_one_store_is_read_by_the_next(tmp_path):
    path = tmp_path / "answers.jsonl"
    key = ("", "Relu", 14, (("tensor", "float32", 2),), b"\x00\x01", None, 1.5)
    AnswerStore(path).put(key, {"reason": "", "code": ""})
    AnswerStore(path).put(("other",), {"reason": "no", "code": "op"})
    later = AnswerStore(path)
    assert later.get(key) == {"reason": "", "code": ""}
    assert later.get(("other",)) == {"reason": "no", "code": "op"}
    assert later.get(("missing",)) is None


def test_the_digest_is_the_same_in_every_process_and_differs_by_key():
    assert key_digest(("a", 1, b"x")) == key_digest(("a", 1, b"x"))
    assert key_digest(("a", 1)) != key_digest(("a", 2)) != key_digest(("a", "1"))


def test_damaged_lines_are_skipped_and_the_rest_is_read(tmp_path):
    path = tmp_path / "answers.jsonl"
    AnswerStore(path).put("k", {"v": 1})
    with open(path, "a") as f:
        f.write('{"not": "a pair"}\n["half\n\n[3, {"v": 2}]\n')
    AnswerStore(path).put("j", {"v": 3})
    later = AnswerStore(path)
    assert later.get("k") == {"v": 1} and later.get("j") == {"v": 3}


def test_a_file_past_its_limit_starts_afresh(tmp_path):
    path = tmp_path / "answers.jsonl"
    store = AnswerStore(path)
    for i in range(5):
        store.put(i, {"i": i})
    assert AnswerStore(path, limit=10).get(4) == {"i": 4}
    small = AnswerStore(path, limit=3)
    assert small.get(4) is None
    assert path.with_suffix(".old").exists() and not path.exists()


def test_an_unwritable_cache_only_costs_the_asking(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    store = AnswerStore(blocked / "answers.jsonl")  # a folder under a file cannot exist
    store.put("k", {"v": 1})
    assert store.get("k") == {"v": 1}  # kept in memory for this process
    assert not os.path.isdir(blocked)

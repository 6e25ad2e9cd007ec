"""The Storage contract (rllog/storage.py docstring), run against local disk, memory://,
the GCS emulator and moto S3 (fixture ``storage_url`` in conftest.py)."""

from __future__ import annotations

import pickle

import pytest

from rllog.storage import Storage, open_storage


@pytest.fixture
def store(storage_url):
    url, options = storage_url
    storage = open_storage(url, **options)
    yield storage
    storage.close()


def reopen(storage_url) -> Storage:
    url, options = storage_url
    return open_storage(url, **options)


def test_is_a_storage_with_its_url(store, storage_url):
    assert isinstance(store, Storage)
    assert store.url.rstrip("/") == storage_url[0].rstrip("/")


def test_write_then_read_returns_the_bytes(store):
    data = bytes(range(256)) * 3
    store.write("config.json", data)
    assert store.read("config.json") == data
    assert store.size("config.json") == 768
    store.write("config.json", b"{}")
    assert store.read("config.json") == b"{}"


def test_write_nested_name_and_list(store):
    store.write("b.txt", b"b")
    store.write("sub/dir/a.txt", b"a")
    store.append("a.jsonl", b"{}\n")
    assert store.list() == ["a.jsonl", "b.txt", "sub/dir/a.txt"]
    assert store.list("sub/") == ["sub/dir/a.txt"]
    assert store.list("zzz") == []


def test_append_keeps_order_across_flushes(store):
    rows = [b'{"step": %d}\n' % i for i in range(30)]
    for i, row in enumerate(rows):
        store.append("metrics.jsonl", row)
        if i % 7 == 3:
            store.flush()
    assert store.read("metrics.jsonl") == b"".join(rows)
    store.flush(durable=True)
    assert store.read("metrics.jsonl") == b"".join(rows)
    assert store.size("metrics.jsonl") == sum(map(len, rows))


def test_appended_bytes_are_visible_to_a_new_handle_after_flush(store, storage_url):
    store.append("metrics.jsonl", b"1\n")
    store.append("metrics.jsonl", b"2\n")
    store.flush(durable=True)
    other = reopen(storage_url)
    try:
        assert other.read("metrics.jsonl") == b"1\n2\n"
        other.append("metrics.jsonl", b"3\n")
        other.flush(durable=True)
    finally:
        other.close()
    store.append("metrics.jsonl", b"4\n")
    store.close()
    assert reopen(storage_url).read("metrics.jsonl") == b"1\n2\n3\n4\n"


def test_write_replaces_earlier_appends_and_later_appends_follow(store, storage_url):
    store.append("metrics.jsonl", b"old\n")
    store.flush()
    store.append("metrics.jsonl", b"staged\n")
    store.write("metrics.jsonl", b"new\n")
    store.append("metrics.jsonl", b"after\n")
    assert store.read("metrics.jsonl") == b"new\nafter\n"
    store.close()
    assert reopen(storage_url).read("metrics.jsonl") == b"new\nafter\n"


def test_read_range(store):
    store.write("x.bin", b"0123456789")
    store.append("x.bin", b"abc")
    assert store.read_range("x.bin", 0, 3) == b"012"
    assert store.read_range("x.bin", 8) == b"89abc"
    assert store.read_range("x.bin", 9, 11) == b"9a"
    assert store.read_range("x.bin", 11, 100) == b"bc"
    assert store.read_range("x.bin", 20) == b""


def test_exists_and_remove(store):
    assert not store.exists("a.txt")
    store.write("a.txt", b"a")
    store.append("b.jsonl", b"b\n")
    assert store.exists("a.txt") and store.exists("b.jsonl")
    store.flush()
    store.remove("a.txt")
    store.remove("b.jsonl")
    assert not store.exists("a.txt") and not store.exists("b.jsonl")
    assert store.list() == []


def test_missing_files_raise_file_not_found_naming_the_url(store):
    for call in (lambda: store.read("nope.txt"), lambda: store.size("nope.txt"), lambda: store.remove("nope.txt")):
        with pytest.raises(FileNotFoundError, match="nope.txt"):
            call()
    with pytest.raises(FileNotFoundError):
        store.read_range("nope.txt", 0, 1)


@pytest.mark.parametrize("name", ["../escape", "/abs", "a\\b", "a//b", "a/./b", "", "x\x00y", "dir/"])
def test_bad_names_are_refused(store, name):
    with pytest.raises(ValueError):
        store.write(name, b"x")
    with pytest.raises(ValueError):
        store.append(name, b"x")


def test_pickles_as_configuration(store, storage_url):
    store.append("metrics.jsonl", b"1\n")
    store.flush()
    clone = pickle.loads(pickle.dumps(store))
    try:
        assert type(clone) is type(store) and clone.url == store.url
        assert clone.read("metrics.jsonl") == b"1\n"
        assert len(pickle.dumps(store)) < 2000  # configuration, not state
    finally:
        clone.close()


def test_close_is_idempotent_and_flushes(store, storage_url):
    store.append("checkpoints.jsonl", b'{"name": "000010"}\n')
    store.close()
    store.close()
    assert reopen(storage_url).read("checkpoints.jsonl") == b'{"name": "000010"}\n'


def test_empty_append_creates_nothing_visible_twice(store):
    store.append("m.jsonl", b"a\n")
    store.append("m.jsonl", b"")
    store.flush()
    assert store.read("m.jsonl") == b"a\n"


def test_large_whole_file_is_atomic_and_exact(store):
    data = b"<html>" + b"x" * (3 * 2**20) + b"</html>"
    store.write("train_iteration_000001.html", data)
    store.flush()
    assert store.read("train_iteration_000001.html") == data

"""Runs of any length: close, resume and the reader's costs do not grow with the run
(issue 15). Small instances here; the big sizes live in benchmarks/bench_scale.py."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest

import rllog._run
import rllog.index
from rllog import RunLogger
from rllog._write import resume


def _metrics_file(path: Path, rows: int, *, every: int = 0) -> int:
    """Write ``rows`` rllog-like rows (~100 bytes each) to path/metrics.jsonl; with
    ``every``, each ``every``-th row logs no step (kept in place on resume). Returns bytes."""
    pad = "x" * 60
    lines = []
    for s in range(rows):
        if every and s % every == 0:
            lines.append(f'{{"note": "{pad}"}}\n')
        else:
            lines.append(f'{{"step": {s}, "loss": {s * 0.5}, "pad": "{pad}"}}\n')
    data = "".join(lines).encode()
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_bytes(data)
    return len(data)


def _peak_of(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("every", [0, 1000], ids=["tail", "interleaved"])
def test_resume_streams_the_metrics_file_in_bounded_memory(tmp_path, monkeypatch, every):
    """10 MB of rows, the last half moved: peak Python memory stays under 4 MiB (the old
    whole-file pass held the file and its lines, > 20 MB), and every row is accounted for."""
    monkeypatch.setattr(resume, "_CHUNK", 256 << 10, raising=False)
    rows = 100_000
    size = _metrics_file(tmp_path, rows, every=every)
    assert size > 10e6
    notes: list[str] = []
    peak = _peak_of(
        lambda: resume.supersede(
            rllog.storage.LocalStorage(tmp_path), rows // 2, lambda m, **k: notes.append(m)
        )
    )
    assert peak < 4 << 20, f"resume peaked at {peak / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB file"
    kept = (tmp_path / "metrics.jsonl").read_bytes().splitlines()
    moved = (tmp_path / "metrics.superseded.jsonl").read_bytes().splitlines()
    steps_moved = [json.loads(x)["step"] for x in moved]
    assert steps_moved == [s for s in range(rows // 2, rows) if not (every and s % every == 0)]
    assert len(kept) + len(moved) == rows
    assert all(json.loads(x).get("step", 0) < rows // 2 for x in kept)
    assert notes and "moved" in notes[-1]


def test_resume_keeps_a_last_line_without_newline_and_moves_nothing_when_all_stay(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b'{"step": 0}\n{"step": 1}\n\n{"step": 2}')
    resume.supersede(rllog.storage.LocalStorage(tmp_path), 5, lambda m, **k: None)
    assert (tmp_path / "metrics.jsonl").read_bytes() == b'{"step": 0}\n{"step": 1}\n\n{"step": 2}'
    assert not (tmp_path / "metrics.superseded.jsonl").exists()
    resume.supersede(rllog.storage.LocalStorage(tmp_path), 2, lambda m, **k: None)
    assert (tmp_path / "metrics.jsonl").read_bytes() == b'{"step": 0}\n{"step": 1}\n\n'
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes() == b'{"step": 2}\n'


@pytest.mark.slow
def test_close_of_a_long_run_hands_the_index_to_a_process_of_its_own(tmp_path, monkeypatch):
    """Past INLINE_INDEX_BYTES close neither reads the run nor renders the page in the
    training process; the detached job writes a page that counts every row."""
    monkeypatch.setattr(rllog._run, "INLINE_INDEX_BYTES", 1000, raising=False)
    calls: list[object] = []
    monkeypatch.setattr(rllog.index, "write_index", lambda *a, **k: calls.append(a))
    logger = RunLogger(tmp_path, code_diff=False)
    for s in range(50):
        logger.log_metrics(s, {"loss": 1.0 / (s + 1), "env/all/reward/total": s * 0.1})
    logger.close()
    assert calls == [] and logger.warnings == []
    assert logger.index_url == f"{tmp_path}/index.html"
    page = tmp_path / "index.html"
    deadline = time.monotonic() + 120
    while not page.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "<li>50 rows</li>" in page.read_text()


# -- several writers of one run ---------------------------------------------------------


def test_two_workers_writing_the_same_iteration_keep_both_files(tmp_path):
    """Two pickled loggers (two rollout workers) write iteration 3's report and rollout
    summaries: the first one's files stay, the second's go to ``-2`` copies, a warning names
    them, and the reader lists both under iteration 3."""
    import pickle

    from rllog import logtree, read_run

    learner = RunLogger(tmp_path, code_diff=False)
    learner.log_metrics(0, {"loss": 1.0})
    blob = pickle.dumps(learner)
    workers = [pickle.loads(blob), pickle.loads(blob)]
    for w, worker in enumerate(workers):
        with worker.iteration(3):
            logtree.text(f"worker {w} was here")
        worker.log_rollouts(
            3, [[{"steps": [{"ob_len": 1, "ac_len": 2, "reward": float(w)}], "final_reward": 0.0}]]
        )
        worker.close()
    learner.close()
    assert "worker 0 was here" in (tmp_path / "train_iteration_000003.html").read_text()
    assert "worker 1 was here" in (tmp_path / "train_iteration_000003-2.html").read_text()
    assert "worker 1 was here" in (tmp_path / "train_iteration_000003-2_logtree.json").read_text()
    first = json.loads((tmp_path / "train_iteration_000003_rollout_summaries.jsonl").read_text())
    second = json.loads((tmp_path / "train_iteration_000003-2_rollout_summaries.jsonl").read_text())
    assert (first["total_reward"], second["total_reward"]) == (0.0, 1.0)
    assert workers[0].warnings == []
    assert any("train_iteration_000003-2.html" in m for m in workers[1].warnings)
    assert any("train_iteration_000003-2_rollout_summaries.jsonl" in m for m in workers[1].warnings)
    run = read_run(tmp_path)
    (it,) = [it for it in run.iterations if it.iteration == 3]
    assert sorted(a.name for a in it.artifacts) == [
        "train_iteration_000003-2.html",
        "train_iteration_000003-2_logtree.json",
        "train_iteration_000003-2_rollout_summaries.jsonl",
        "train_iteration_000003.html",
        "train_iteration_000003_logtree.json",
        "train_iteration_000003_rollout_summaries.jsonl",
    ]


def test_a_worker_rewriting_its_own_iteration_replaces_its_file(tmp_path):
    import pickle

    learner = RunLogger(tmp_path, code_diff=False)
    worker = pickle.loads(pickle.dumps(learner))
    for reward in (1.0, 2.0):
        worker.log_rollouts(5, [[{"steps": [{"reward": reward}], "final_reward": 0.0}]])
        worker.flush()
    worker.close()
    learner.close()
    assert not (tmp_path / "train_iteration_000005-2_rollout_summaries.jsonl").exists()
    assert (
        json.loads((tmp_path / "train_iteration_000005_rollout_summaries.jsonl").read_text())["total_reward"]
        == 2.0
    )


def test_pickled_loggers_in_another_process(tmp_path):
    """A memory:// logger unpickled in another process raises saying memory:// is per
    process; a rank-1 NullRunLogger stays a non-writer there (no RANK set)."""
    import os
    import pickle
    import subprocess
    import sys

    from rllog._run import NullRunLogger

    mem = RunLogger(f"memory://scale-{os.getpid()}/run", code_diff=False, index=False)
    null = RunLogger(tmp_path, rank=1)
    assert isinstance(null, NullRunLogger)
    code = (
        "import pickle, sys\n"
        "null_blob, mem_blob = pickle.load(sys.stdin.buffer)\n"
        "null = pickle.loads(null_blob)\n"
        "null.log_metrics(0, {'x': 1.0}); null.close()\n"
        "print('null', type(null).__name__, null.is_writer, null.rank)\n"
        "try:\n"
        "    pickle.loads(mem_blob)\n"
        "except RuntimeError as exc:\n"
        "    print('mem', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps((pickle.dumps(null), pickle.dumps(mem))),
        capture_output=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout.decode()
    mem.close()
    assert "null NullRunLogger False 1" in out
    assert "memory:// runs live in the memory of the process that opened them" in out
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    ("line", "position"),
    [
        (b'{"step": 1, "progress/batch": 5, "a": 1}', 5),
        (b'{"step":1,"progress/batch":5.5}', 5.5),
        (b'{"step":1, "progress/batch" : -2.5E-1 }\r', -0.25),
        (b'{"step":1,"progress/batch":NaN}', "nan"),
        (b'{"step":2,"a":NaN,"progress/batch":4}', 4),
        (b'{"step":1,"progress/batch":true}', 1),  # a bool is no batch index: the step
        (b'{"step":1,"progress/batch":"3"}', 1),
        (b'{"step":1,"progress/batch":null}', 1),
        (b'{"step":1,"x":{"progress/batch":9}}', 1),  # nested: not the row's key
        (b'{"x":{"a":1},"progress/batch":4}', 4),
        (b'{"step":1,"a":"\\"progress/batch\\":3"}', 1),  # inside a string
        (b'{"step":1,"a":"progress/batch","b":2}', 1),  # a value, not a key
        (b'[{"progress/batch":4}]', None),
        (b'{"step":3}', 3),
        (b'{"x":1}', None),
        (b'{"step":1,"progress/batch":99999999999999999999999}', 99999999999999999999999),
    ],
)
def test_resume_position_read_from_bytes_agrees_with_decoding(line, position):
    """The byte-level read of ``progress/batch`` gives what decoding the row gives."""
    got = resume.resume_position(line)
    if position == "nan":
        assert got != got
    else:
        assert got == position and type(got) is type(position)


@pytest.mark.parametrize("line", [b'{"s', b'{"step":1,"progress/batch":01}', b"  "])
def test_resume_position_of_a_line_that_is_not_json_raises(line):
    with pytest.raises(ValueError):
        resume.resume_position(line)


# -- readers ------------------------------------------------------------------------------


def _wide_run(path: Path, rows: int, keys: int) -> None:
    with RunLogger(path, code_diff=False, index=False) as logger:
        for s in range(rows):
            logger.log_metrics(
                s,
                {"nan": float("nan"), "inf": float("inf"), **{f"k/{j}": s * 0.5 + j for j in range(keys)}},
            )


def test_metrics_are_built_column_by_column(tmp_path, monkeypatch):
    """A clean run's DataFrame, read in many small pieces, equals the row-by-row one;
    NaN/Infinity survive."""
    import pandas as pd

    from rllog import read_run
    from rllog._read import columnar
    from rllog._read.run import _to_frame

    monkeypatch.setattr(columnar, "_PIECE", 64 << 10)
    _wide_run(tmp_path, 4000, 40)
    run = read_run(tmp_path)
    df = run.metrics
    assert run._one_clean_segment  # the columnar path answered
    assert df["nan"].isna().all() and (df["inf"] == float("inf")).all()
    assert run.warnings == []
    pd.testing.assert_frame_equal(df, _to_frame(run.rows, "step"))


_READ_RSS = r"""
import json, sys
from rllog import read_run
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
path, warm, columns = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
read_run(warm, columns=columns).metrics  # modules imported and code paths loaded: not the read's data
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # peak RSS (VmHWM) := RSS now; ru_maxrss would hold the parent's RSS at fork
before = status("VmRSS:")
df = read_run(path, columns=columns).metrics
added = status("VmHWM:") - before
print(json.dumps({"added": added, "frame": int(df.memory_usage(deep=True).sum()), "shape": df.shape}))
"""


def _read_rss(path: Path, warm: Path, columns: list[str] | None) -> dict:
    """Peak RSS added by ``read_run(path, columns=columns).metrics`` in a fresh process
    that first read the small run ``warm`` the same way (bytes), the DataFrame's
    ``memory_usage(deep=True)`` and its shape."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _READ_RSS, str(path), str(warm), json.dumps(columns)],
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(rllog.__file__).parents[1])},
        cwd=path,  # not the working folder: `python -c` puts it first on sys.path
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc peak RSS reset")
def test_metrics_peak_memory_stays_near_the_dataframe(tmp_path):
    """A 30 MB run (23k rows x 104 keys, NaN/Infinity/-Infinity, a string and an int key):
    reading its DataFrame adds at most 2.5x the DataFrame's memory to the process's peak
    RSS (the whole-file pyarrow read added ~6x: its parsed table, the raw blocks and the
    conversion), and ``columns=`` adds less than the whole DataFrame (the other keys are
    never materialised)."""
    for folder, rows in (("warm", 10), ("run", 23_000)):
        lines = []
        for s in range(rows):
            values = ", ".join(f'"k/{j}": {(s * 7 + j) % 97 / 97:.4f}' for j in range(100))
            lines.append(
                f'{{"step": {s}, "nan": NaN, "inf": Infinity, "ninf": -Infinity, "count": {s}, '
                f'"tag": "{"abc"[s % 3]}", {values}}}\n'
            )
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "metrics.jsonl").write_text("".join(lines))
    run, warm = tmp_path / "run", tmp_path / "warm"
    full = _read_rss(run, warm, None)
    assert full["shape"] == [23_000, 106]
    assert full["added"] <= 2.5 * full["frame"], (
        f"reading added {full['added'] / 2**20:.0f} MiB for a {full['frame'] / 2**20:.0f} MiB DataFrame"
    )
    some = _read_rss(run, warm, ["k/3", "inf"])
    assert some["shape"] == [23_000, 3]
    assert some["added"] < full["frame"], (
        f"columns= added {some['added'] / 2**20:.0f} MiB; the whole DataFrame is {full['frame'] / 2**20:.0f} MiB"
    )


def test_columns_reads_only_the_keys_asked_for(tmp_path):
    from rllog import read_run

    _wide_run(tmp_path, 50, 5)
    run = read_run(tmp_path, columns=["k/3", "nan"])
    assert list(run.metrics.columns) == ["step", "k/3", "nan"]
    assert run.metrics["k/3"].tolist() == [s * 0.5 + 3 for s in range(50)]
    with pytest.raises(KeyError, match="no column 'nope'"):
        _ = read_run(tmp_path, columns=["nope"]).metrics
    with pytest.raises(TypeError, match="list of metric names"):
        read_run(tmp_path, columns="k/3")
    # repeated steps take the row-by-row path: the same selection
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 10, "k/3": -1.0}\n')
    run = read_run(tmp_path, columns=["k/3"])
    assert list(run.metrics.columns) == ["step", "k/3"] and run.metrics["k/3"].tolist()[-1] == -1.0
    assert len(run.metrics) == 11 and run.restarts == [(51, 10)]

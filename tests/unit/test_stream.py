"""Streamed standing rows (rllog._read.stream) equal the in-memory rule, and the
streaming tools (`rllog summary`, `doctor`, `tail`) stay in bounded memory."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rllog._format.jsonl import JsonlTail
from rllog._format.rows import StepResolver
from rllog._read import stream
from rllog._read.stream import StreamedRows
from rllog.storage import LocalStorage

KEYS = ["a", "b", "test/x"]

_row = st.one_of(
    st.builds(
        lambda step, keys, vals: {"step": step, **dict(zip(keys, vals, strict=False))},
        st.integers(0, 12),
        st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True),
        st.lists(st.sampled_from([0.0, 1.0, 2.5, math.nan, math.inf, None, "s"]), min_size=3, max_size=3),
    ),
    st.just({"note": "no step"}),
    st.just("garbage{"),  # a damaged line
    st.just(""),  # a blank line
)


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=40), torn=st.sampled_from(["", '{"step": 99', '{"step": 98}']))
def test_streamed_rows_equal_the_in_memory_rule(tmp_path, monkeypatch, rows, torn):
    """Any mix of repeats, late rows, restarts, unstepped and damaged lines, read through
    chunks small enough to cut lines: same rows, counts and messages as StepResolver."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 16)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    data = ("\n".join(lines) + ("\n" if lines else "") + torn).encode()
    (tmp_path / "m.jsonl").write_bytes(data)
    storage = LocalStorage(tmp_path)
    tail = JsonlTail(storage, "m.jsonl")
    resolver = StepResolver("step")
    for line, row in tail.poll(final=True):
        resolver.add(line, row)
    streamed = StreamedRows(storage, "m.jsonl", "step", len(data))
    assert _same(list(streamed.rows()), resolver.kept + [r for _, r in resolver.unstepped])
    assert (streamed.added, streamed.merged, streamed.superseded, streamed.unstepped) == (
        resolver.added,
        resolver.merged,
        len(resolver.superseded),
        len(resolver.unstepped),
    )
    assert streamed.restarts == resolver.restarts
    assert (streamed.problems, streamed.torn) == (tail.problems, tail.torn)


def write_run(folder, rows: int, keys: int = 100) -> int:
    """A run of ``rows`` steps x ``keys`` floats (PPO/GRPO names among them), an eval row
    every 20 steps and a restart at two thirds; returns the file's size in bytes."""
    folder.mkdir()
    names = ["loss/policy", "ppo/policy/clipfrac", "objective/kl", "time/total", "env/all/reward/total"]
    names += [f"metric/{i:03d}" for i in range(keys - len(names))]
    with open(folder / "metrics.jsonl", "w") as f:
        for step in [*range(rows), *range(2 * rows // 3, rows + 5)]:
            cells = ",".join(f'"{n}":{(step * 7 + i) % 97 / 97:.6f}' for i, n in enumerate(names))
            f.write(f'{{"step":{step},{cells}}}\n')
            if step % 20 == 0:
                f.write(f'{{"step":{step},"test/env/all/reward/total":0.5}}\n')
    return (folder / "metrics.jsonl").stat().st_size


_MEASURE = textwrap.dedent(
    """
    import json, sys, tracemalloc
    from click.testing import CliRunner
    from rllog.cli import main
    import rllog.doctor, rllog._read.summary  # imports are not the run's memory
    out = {}
    for cmd in (["summary", "--json"], ["doctor", "--json"], ["tail", "-n", "5"]):
        tracemalloc.start()
        result = CliRunner().invoke(main, [*cmd, sys.argv[1]])
        out[cmd[0]] = [tracemalloc.get_traced_memory()[1], result.exit_code, result.output]
        tracemalloc.stop()
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_summary_doctor_tail_stream_a_50mb_run_in_bounded_memory(tmp_path):
    """A 50 MB run (20k rows x 100 keys) through the CLI under tracemalloc: each tool
    peaks far below the file (the in-memory reader took ~5x the file)."""
    size = write_run(tmp_path / "run", 20_000)
    assert size > 45e6
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(tmp_path / "run")], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    peaks = json.loads(proc.stdout)
    summary = json.loads(peaks["summary"][2])
    assert summary["rows"] == 20_005 and summary["superseded_rows"] > 6_000
    assert summary["merged_rows"] == 1_000 + 334
    assert json.loads(peaks["doctor"][2])["run"] == str(tmp_path / "run")
    assert peaks["tail"][2].count("\n") == 5
    print({tool: f"{peak / 2**20:.1f} MiB" for tool, (peak, _c, _o) in peaks.items()})
    for tool, (peak, _code, _out) in peaks.items():
        assert peak < 24 * 2**20, (
            f"rllog {tool} peaked at {peak / 2**20:.0f} MiB on a {size / 1e6:.0f} MB run"
        )


def test_tail_numbers_lines_right_after_a_last_row_read_before_its_newline(tmp_path):
    """A final poll takes a complete last row that has no newline yet; the newline that
    arrives later ends that line, it does not start a new one."""
    from rllog.storage import LocalStorage

    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step":0}\n{"step":1}')
    tail = JsonlTail(LocalStorage(tmp_path), "m.jsonl")
    assert [n for n, _ in tail.poll(final=True)] == [1, 2]
    with open(path, "ab") as f:
        f.write(b'\n{"step":2}\nnot json\n')
    assert [(n, r["step"]) for n, r in tail.poll()] == [(3, 2)]
    assert tail.lines == 4 and "line 4" in tail.problems[-1]

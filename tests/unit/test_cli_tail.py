"""`rllog tail` on what a real metrics file holds: damaged lines near its end, keys that only
some rows have (evaluation rows), a run still being written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rllog.cli import main


def _tail(*args):
    return CliRunner().invoke(main, ["tail", *map(str, args)])


@pytest.mark.parametrize("rows_before", [1, 40])
def test_tail_with_a_damaged_line_among_the_last_rows(tmp_path, rows_before):
    # the window of the last rows is read twice to number the damaged line; the second read
    # reused the reader's memory of the first: it started before the file's first byte (the
    # command died with "[Errno 22] Invalid argument"), or took the file for rewritten and
    # read all of it, with a false "was rewritten" warning
    rows = [f'{{"step":{i},"loss":{i}.5}}\n' for i in range(rows_before + 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(rows[:-1]) + "not json\n" + rows[-1])
    result = _tail(tmp_path, "-n", "3")
    assert result.exit_code == 0, result.output
    n = rows_before + 3
    assert [line for line in result.output.splitlines() if line.startswith("{")] == [
        f'{{"step": {i}, "loss": {i}.5}}' for i in range(n - 3, n)
    ]
    assert f"metrics.jsonl line {n}: not JSON" in result.output and "rewritten" not in result.output


def _eval_run(path, n=10, eval_at=(3,)):
    path.mkdir(exist_ok=True)
    with open(path / "metrics.jsonl", "a") as f:
        for i in range(n):
            f.write(f'{{"step":{i},"loss":{i}.5' + (',"test/reward":0.25' if i in eval_at else "") + "}\n")


def test_tail_key_that_only_earlier_rows_have_is_a_metric(tmp_path):
    # -k was checked against the rows shown only: an evaluation key absent from the last
    # rows was "not a metric of" the run, exit 2
    _eval_run(tmp_path)
    result = _tail(tmp_path, "-n", "2", "-k", "test/reward", "-k", "loss")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "step=8  test/reward=-  loss=8.5",
        "step=9  test/reward=-  loss=9.5",
    ]
    typo = _tail(tmp_path, "-n", "2", "-k", "test/rewrd")  # a key no row has is still an error
    assert typo.exit_code == 2 and "closest: test/reward" in typo.output


def test_tail_follow_waits_for_a_key_not_logged_yet(tmp_path):
    # `tail -f -k test/reward` on a run that had not evaluated yet exited at once
    import os
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    _eval_run(tmp_path, n=3, eval_at=())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rllog", "tail", "-f", "-n", "1", "--interval", "0.05", "-k", "test/reward", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while not any(x.startswith("step=2") for x in lines) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, lines  # still following
        with open(tmp_path / "metrics.jsonl", "a") as f:
            f.write('{"step":3,"loss":3.5,"test/reward":0.25}\n')
        while not any("test/reward=0.25" in x for x in lines) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "step=3  test/reward=0.25\n" in lines, lines
        assert any("'test/reward' is not a metric" in x for x in lines)  # said once, not fatal
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_tail_follow_outlives_a_read_error(tmp_path):
    # with -f, one failed read (a bucket that does not answer for a while, here the file
    # replaced by a folder) ended the command with "Error: ..."; it now says so and goes on
    import os
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    _eval_run(tmp_path, n=2, eval_at=())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rllog", "tail", "-f", "-n", "1", "--interval", "0.05", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()

    def wait_for(text):
        deadline = time.monotonic() + 30
        while not any(text in x for x in lines) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert any(text in x for x in lines), lines

    try:
        wait_for('"step": 1')
        metrics = tmp_path / "metrics.jsonl"
        metrics.rename(tmp_path / "aside")
        (tmp_path / "metrics.jsonl").mkdir()  # reading it fails: IsADirectoryError
        wait_for("could not read")
        assert proc.poll() is None, lines
        (tmp_path / "metrics.jsonl").rmdir()
        (tmp_path / "aside").rename(metrics)
        with open(metrics, "a") as f:
            f.write('{"step":2,"loss":2.5}\n')
        wait_for('"step": 2')
    finally:
        proc.terminate()
        proc.wait(timeout=10)

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

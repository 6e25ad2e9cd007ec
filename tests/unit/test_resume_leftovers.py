"""What a resume leaves behind is visible: the crashed run's reports in superseded/ are shown
by the reader, `rllog summary` and index.html; a damaged line in the middle of
metrics.jsonl is said by the resuming logger, the doctor and the index (issue 13, "Resume")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rllog import RunLogger, logtree
from rllog._read.run import read_run
from rllog.cli import main
from rllog.doctor import check_run
from rllog.index import write_index


@pytest.fixture
def resumed(tmp_path: Path) -> Path:
    """Five iterations with reports and summaries, a checkpoint at batch 3, a crash, a
    resume that redoes iteration 3, then a second crash and resume (a second copy)."""
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        for i in range(5):
            logger.log_metrics(i, {"r": float(i)})
            with logger.iteration(i):
                logtree.text(f"first run, iteration {i}")
            logger.log_rollouts(i, [[{"steps": [], "final_reward": float(i)}]])
            if i == 2:
                logger.log_checkpoint("000003", batch=3, state_path="s3")
    for attempt in ("second", "third"):
        with RunLogger(tmp_path, resume=True, code_diff=False, index=False) as logger:
            with logger.iteration(3):
                logtree.text(f"{attempt} run, iteration 3")
            logger.log_metrics(3, {"r": 3.5})
    return tmp_path


def test_reader_lists_and_reads_the_superseded_reports(resumed: Path) -> None:
    run = read_run(resumed)
    its = {it.iteration: sorted(a.name for a in it.artifacts) for it in run.superseded_iterations}
    assert sorted(its) == [3, 4]
    assert its[4] == [
        "superseded/train_iteration_000004.html",
        "superseded/train_iteration_000004_logtree.json",
        "superseded/train_iteration_000004_rollout_summaries.jsonl",
    ]
    assert "superseded/train_iteration_000003.html.2" in its[3]  # the second crash's copy
    assert "first run, iteration 4" in run.html(4, superseded=True)
    assert "first run, iteration 3" in run.html(3, superseded=True)
    assert "third run, iteration 3" in run.html(3)
    assert run.logtree(4, superseded=True)["title"] == "Train iteration 4"
    assert [r["final_reward"] for r in run.rollout_summaries(4, superseded=True)] == [4.0]
    assert [it.iteration for it in run.iterations] == [0, 1, 2, 3]  # standing reports only
    with pytest.raises(FileNotFoundError, match="in superseded/"):
        run.html(1, superseded=True)


def test_summary_and_index_show_the_superseded_files(resumed: Path) -> None:
    out = CliRunner().invoke(main, ["summary", str(resumed)]).output
    assert "superseded by a resume: 8 file(s) of the crashed run in superseded/" in out, out
    url, _ = write_index(resumed)
    page = Path(url).read_text()
    section = page[page.index('id="superseded"') :]
    links = re.findall(r'<a href="\./(superseded/[^"]+)"', section)
    assert "superseded/train_iteration_000004.html" in links
    assert "superseded/train_iteration_000004_rollout_summaries.jsonl" in links
    assert all((resumed / link).is_file() for link in links)


def _damage_line_3(run: Path) -> None:
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    lines[2] = b'{"step":2,"loss":0.3\xff garbage\n'  # a middle line: not torn, damaged
    (run / "metrics.jsonl").write_bytes(b"".join(lines))


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        for i in range(6):
            logger.log_metrics(i, {"loss": 1.0 / (i + 1)})
            if i == 3:
                logger.log_checkpoint(f"{i:06d}", batch=i + 1, state_path=f"/ck/{i}")
    _damage_line_3(tmp_path)
    return tmp_path


def test_resume_says_a_damaged_middle_line(damaged: Path) -> None:
    with pytest.warns(RuntimeWarning, match=r"metrics.jsonl has 1 damaged line\(s\).*line 3"):
        with RunLogger(damaged, resume=True, code_diff=False, index=False) as logger:
            pass
    assert any("metrics.jsonl line 3: not JSON" in w for w in logger.warnings), logger.warnings


def test_doctor_finds_a_damaged_middle_line(damaged: Path) -> None:
    findings = check_run(damaged)
    assert [f.check for f in findings if f.severity == "warning"] == ["damaged_lines"]
    assert "metrics.jsonl line 3" in findings[0].message
    result = CliRunner().invoke(main, ["doctor", str(damaged), "--fail-on", "warning"])
    assert result.exit_code == 1 and "damaged line" in result.output
    as_json = json.loads(CliRunner().invoke(main, ["doctor", str(damaged), "--json"]).output)
    assert as_json["findings"][0]["check"] == "damaged_lines"


def test_a_clean_run_has_no_damage_finding(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        logger.log_metrics(0, {"loss": 1.0})
    assert check_run(tmp_path) == [] or all(f.check != "damaged_lines" for f in check_run(tmp_path))
    result = CliRunner().invoke(main, ["doctor", str(tmp_path), "--fail-on", "warning"])
    assert result.exit_code == 0

"""Input that should fail fast at the call, and the one rule for lone surrogates (issue 13,
"Input that should fail fast, and quietly wrong results")."""

from __future__ import annotations

import decimal
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from rllog import RunLogger, logtree
from rllog._read.run import read_run
from rllog.cli import main

LONE = "\ud83d\u00e9 and \ud835 end"  # a tokenizer cut mid-emoji, then more text
SHOWN = "\ufffd\u00e9 and \ufffd end"


# --- one rule for lone surrogates: whatever the writer accepts, every reader reads ---------


@pytest.fixture
def surrogate_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    with RunLogger(run) as logger:
        logger.log_config({"prompt": LONE})
        logger.log_metrics(1, {"sample": LONE, "reward": 0.5})
        logger.log_checkpoint("000001", batch=2, note=LONE)
        logger.log_rollouts(
            1, [[{"steps": [{"reward": 1.0, "ob_len": 3, "ac_len": 2, "logs": {"text": LONE}}]}]]
        )
        with logger.iteration(1):
            logtree.text(LONE)
    return run


def test_files_with_lone_surrogates_are_valid_utf8_with_u_fffd(surrogate_run: Path) -> None:
    for path in surrogate_run.iterdir():
        if path.suffix in (".jsonl", ".json", ".html"):
            text = path.read_bytes().decode("utf-8")  # strict: no surrogate escapes, no bad bytes
            assert "\\ud83d" not in text.lower() and "\\ud835" not in text.lower(), path.name
    row = json.loads((surrogate_run / "metrics.jsonl").read_text("utf-8"))
    assert row == {"step": 1, "sample": SHOWN, "reward": 0.5}
    assert json.loads((surrogate_run / "config.json").read_text("utf-8"))["prompt"] == SHOWN
    assert json.loads((surrogate_run / "checkpoints.jsonl").read_text("utf-8"))["note"] == SHOWN


@pytest.mark.parametrize("infer_string", [True, False])  # pyarrow-backed strings (pandas 3) and objects
def test_pandas_reads_every_file(surrogate_run: Path, infer_string: bool) -> None:
    with pd.option_context("future.infer_string", infer_string):
        metrics = pd.read_json(surrogate_run / "metrics.jsonl", lines=True)
        rollouts = pd.read_json(surrogate_run / "train_iteration_000001_rollout_summaries.jsonl", lines=True)
    assert metrics["sample"].tolist() == [SHOWN]
    assert rollouts["steps"][0][0]["logs"] == {"text": SHOWN}
    pyarrow = pytest.importorskip("pyarrow")
    assert pyarrow is not None
    arrow = pd.read_json(surrogate_run / "metrics.jsonl", lines=True, dtype_backend="pyarrow")
    assert arrow["sample"].tolist() == [SHOWN]


def test_our_readers_and_cli_read_it(surrogate_run: Path) -> None:
    run = read_run(surrogate_run)
    assert run.metrics["sample"].tolist() == [SHOWN]
    runner = CliRunner()
    for args in (
        ["summary", str(surrogate_run)],
        ["doctor", str(surrogate_run)],
        ["index", str(surrogate_run)],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)


def test_an_old_file_with_surrogate_escapes_is_read_with_u_fffd(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step":0,"s":"\\ud83d\\u00e9","x":1.0}\n')
    assert read_run(tmp_path).metrics["s"].tolist() == ["\ufffd\u00e9"]


def test_a_metric_key_with_a_lone_surrogate_is_refused_naming_it(tmp_path: Path) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with pytest.raises(TypeError, match="lone surrogate"):
            logger.log_metrics(0, {"bad\ud800key": 1.0})
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == b""


def test_html_shows_a_marked_u_fffd_not_the_escape_text(surrogate_run: Path) -> None:
    page = (surrogate_run / "train_iteration_000001.html").read_text("utf-8")
    marks = re.findall(
        r'<mark class="rllog-bad-char" title="lone surrogate U\+(D8[0-9A-F]{2})[^"]*">\ufffd</mark>', page
    )
    assert "D835" in marks and "D83D" in marks
    assert "\\ud835" not in page and "\\udXXX" not in page


def test_html_marker_never_lands_inside_a_tag(tmp_path: Path) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with logger.iteration(0):
            with logtree.group(0, title="t\ud835"):  # the title may land in an attribute
                logtree.text("x")
    page = (tmp_path / "run" / "train_iteration_000000.html").read_text("utf-8")
    for tag in re.findall(r"<[^>]*>", page):
        assert "<mark" not in tag[1:], tag


# --- misuse raises at the call, naming what was wrong ----------------------------------------


@pytest.mark.parametrize("name", [None, 3, b"eval"])
def test_evaluation_needs_a_str_name(tmp_path: Path, name) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with pytest.raises(TypeError, match="name must be the evaluator's name, a str"):
            logger.evaluation(name, 7)
    assert not list((tmp_path / "run").glob("*iteration_000007*"))


def test_empty_metric_key_raises(tmp_path: Path) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with pytest.raises(ValueError, match="empty key"):
            logger.log_metrics(0, {"": 1.0, "ok": 2.0})
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == b""


@pytest.mark.parametrize("iteration", [-1, 2**63, 10**188, 2**70], ids=["-1", "2**63", "10**188", "2**70"])
def test_absurd_iterations_raise_at_the_call(tmp_path: Path, iteration: int) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with pytest.raises(ValueError, match=r"iteration must be >= 0 and < 2\*\*63"):
            logger.iteration(iteration)  # not at the with: at the call
        with pytest.raises(ValueError, match=r"< 2\*\*63"):
            logger.evaluation("e", iteration)
        with pytest.raises(ValueError, match=r"< 2\*\*63"):
            logger.log_rollouts(iteration, [[{"steps": []}]])
    assert not list((tmp_path / "run").glob("*iteration*"))


def test_decimal_snan_names_the_key(tmp_path: Path) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with pytest.raises(ValueError, match="metric 'lossy' at step 1: Decimal"):
            logger.log_metrics(1, {"lossy": decimal.Decimal("sNaN")})
        with pytest.raises(ValueError, match="lossy"):
            logger.log_checkpoint("a", batch=1, lossy=decimal.Decimal("sNaN"))


class _Text(str):
    pass


def test_str_subclass_content_is_written(tmp_path: Path) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with logger.iteration(1):
            logtree.text(_Text("hello from a str subclass"))
            with logtree.group(0, title=_Text("a group title")):
                logtree.text(_Text("in a group"))
    page = (tmp_path / "run" / "train_iteration_000001.html").read_text("utf-8")
    assert "hello from a str subclass" in page and "in a group" in page and "a group title" in page


def test_one_element_tensors_are_numbers_in_loop_state_as_in_metrics(tmp_path: Path) -> None:
    values = {"lr": np.array([0.1]), "scale": np.float32(2.0)}
    torch = None
    try:
        import torch  # not in the test extra: the numpy case is the same rule
    except ImportError:
        pass
    if torch is not None:
        values["kl_coef"] = torch.tensor([0.25])
    with RunLogger(tmp_path / "run") as logger:
        logger.log_metrics(0, dict(values))
        logger.log_checkpoint("000000", batch=1, **values)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    record = json.loads((tmp_path / "run" / "checkpoints.jsonl").read_text())
    for key in values:
        assert record[key] == row[key] and isinstance(record[key], float), key
    assert record["lr"] == 0.1


def test_iteration_pages_have_index_csp(tmp_path: Path) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with logger.iteration(0):
            logtree.html("<script>alert(1)</script>")
        logger.log_metrics(0, {"x": 1.0})
    csp = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">')
    page = csp.findall((tmp_path / "run" / "train_iteration_000000.html").read_text())
    index = csp.findall((tmp_path / "run" / "index.html").read_text())
    assert page == index and len(page) == 1 and "default-src 'none'" in page[0]


# --- the command line: unknown -k keys, control characters -----------------------------------


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    with RunLogger(run) as logger:
        logger.log_config({"a\x1b[31mRED": 1, "title": "x\x1b]0;pwned\x07", "bidi": "\u202eevil"})
        for i in range(3):
            logger.log_metrics(i, {"reward/mean": 0.5 * i, "we\x1b[2Jird": 1.0, "loss": 0.1})
    return run


@pytest.mark.parametrize(
    "command",
    [
        ["summary", "{run}", "-k", "reward/maen"],
        ["tail", "{run}", "-k", "reward/maen"],
        ["diff", "{run}", "{run}", "-k", "reward/maen"],
        ["index", "{run}", "-k", "reward/maen"],
        ["plot", "{run}", "-k", "reward/maen", "-o", "{run}/p.svg"],
    ],
)
def test_unknown_key_errors_with_closest_matches(hostile_run: Path, command: list[str]) -> None:
    args = [a.replace("{run}", str(hostile_run)) for a in command]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "'reward/maen' is not a metric" in result.output and "closest: reward/mean" in result.output


def test_tail_with_a_known_key_prints_values(hostile_run: Path) -> None:
    result = CliRunner().invoke(main, ["tail", str(hostile_run), "-k", "reward/mean"])
    assert result.exit_code == 0 and "reward/mean=1" in result.output


@pytest.mark.parametrize(
    "args",
    [["summary", "{run}"], ["summary", "{run}", "--json"], ["tail", "{run}"], ["diff", "{run}", "{run}"]],
)
def test_cli_output_has_no_control_characters(hostile_run: Path, args: list[str]) -> None:
    result = CliRunner().invoke(main, [a.replace("{run}", str(hostile_run)) for a in args], color=True)
    assert result.exit_code == 0, result.output
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", result.output), repr(result.output)
    if args[0] == "summary":
        assert "\\u001b" in result.output  # shown escaped, not dropped


def test_rollout_metric_names_with_a_lone_surrogate_are_refused(tmp_path: Path) -> None:
    with RunLogger(tmp_path / "run") as logger:
        with pytest.raises(TypeError, match="lone surrogate"):
            logger.log_rollouts(0, [[{"steps": [{"reward": 1.0, "metrics": {"bad\ud800": 1.0}}]}]])
    assert not list((tmp_path / "run").glob("*rollout_summaries*"))


def test_summary_json_is_strict_json_with_nonfinite_values_as_strings(tmp_path: Path) -> None:
    # `rllog summary --json` wrote bare Infinity/NaN tokens: JSON.parse refuses them and jq 1.6
    # reads Infinity as 1.797e308 and NaN as null, a diverged metric quietly turned into a
    # number; `rllog doctor --json` spells them as strings
    (tmp_path / "metrics.jsonl").write_text(
        '{"step":0,"loss":1.0,"kl":0.5,"reward":1.0}\n{"step":1,"loss":Infinity,"kl":NaN,"reward":-Infinity}\n'
    )
    out = CliRunner().invoke(
        main, ["summary", str(tmp_path), "--json", "-k", "loss", "-k", "kl", "-k", "reward"]
    )
    assert out.exit_code == 0, out.output

    def refuse(token: str) -> None:
        raise AssertionError(f"not strict JSON: {token}")

    info = json.loads(out.output, parse_constant=refuse)
    assert [(x["key"], x["value"], x["step"]) for x in info["last"]] == [
        ("loss", "Infinity", 1),
        ("kl", 0.5, 0),  # the last number: a NaN cell reads as missing, as in the DataFrame
        ("reward", "-Infinity", 1),
    ]

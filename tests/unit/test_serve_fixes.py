"""Fixes from a review of ``rllog serve`` and ``rllog grep``: terminal escapes, refresh after
a rewrite or a resume, deleted runs, smoothing on full-resolution series, split names,
report links, host checks, durations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rllog import RunLogger
from rllog._format.terminal import escape_controls
from rllog.cli import main

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the clipboard
OSC8 = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # a hidden link
OSC0 = "\x1b]0;pwned\x07"  # the window title
CSI = "\x1b[2J\x9b2J\x7f"  # erase the screen (7-bit and C1 forms), DEL


def test_escape_controls_shows_every_control_and_keeps_text():
    assert escape_controls(OSC52) == "\\x1b]52;c;cm0gLXJmIH4=\\x07"
    assert escape_controls(CSI) == "\\x1b[2J\\x9b2J\\x7f"
    assert escape_controls("a\tb\nc é 中 \u00a0") == "a\tb\nc é 中 \u00a0"
    assert escape_controls("\x00\r\x08") == "\\x00\\x0d\\x08"
    every = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) < 0xA0 for c in escape_controls(every))


def _rollouts(path: Path, text: str, key: str = "answer") -> None:
    with RunLogger(path, code_diff=False, index=False) as lg:
        group = [{"steps": [{"ob_len": 1, "ac_len": 2, "reward": 1.0, "logs": {"prompt": "p", key: text}}]}]
        lg.log_rollouts(0, [group])


def test_grep_prints_no_terminal_escape_raw(tmp_path):
    payload = f"needle {OSC52}{OSC8}{OSC0}{CSI} end"
    _rollouts(tmp_path / "r", payload, key=f"ans{OSC0}wer")
    out = CliRunner().invoke(main, ["grep", "needle", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    assert not any(c in out.output for c in "\x1b\x07\x9b\x7f")
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in out.output and "\\x1b]0;pwned\\x07" in out.output
    out = CliRunner().invoke(main, ["grep", "needle", str(tmp_path / "r"), "--json"])
    assert out.exit_code == 0 and not any(c in out.output for c in "\x1b\x07\x9b\x7f")
    hit = json.loads(out.output)
    assert payload.startswith(hit["match"]) and hit["after"] == payload[len("needle") :][:60]


def test_grep_on_a_folder_that_is_no_run_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    out = CliRunner().invoke(main, ["grep", "x", str(tmp_path / "empty")])
    assert out.exit_code == 2 and "no run at" in out.output, out.output
    _rollouts(tmp_path / "r", "nothing here")
    out = CliRunner().invoke(main, ["grep", "absent", str(tmp_path / "r")])
    assert out.exit_code == 1 and "no match in 1 rollout summaries files" in out.output


pytest.importorskip("starlette")
pytest.importorskip("plotly")
from starlette.testclient import TestClient  # noqa: E402  # after the skips

from rllog.serve import serve  # noqa: E402


def _run(path: Path, n: int = 5, **kw) -> None:
    with RunLogger(path, code_diff=False, index=False, **kw) as lg:
        for i in range(n):
            lg.log_metrics(i, {"loss": 1.0 / (i + 1)})


@pytest.mark.parametrize(
    ("host", "url", "header"),
    [("127.0.0.2", "http://127.0.0.2:8799/", "127.0.0.2:8799"), ("::1", "http://[::1]:8799/", "[::1]:8799")],
)
def test_serve_other_loopback_hosts_answer_and_print_a_valid_url(tmp_path, monkeypatch, host, url, header):
    import uvicorn

    _run(tmp_path / "r")
    got: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: got.update(app=app, **kw))
    printed: list[str] = []
    serve([str(tmp_path / "r")], host=host, port=8799, echo=printed.append)
    assert printed == [f"rllog serve: {url}  (Ctrl-C to stop)"] and got["host"] == host
    client = TestClient(got["app"], base_url=f"http://{header}")
    assert client.get("/api/runs").status_code == 200
    assert client.get("/api/runs", headers={"host": "evil.example"}).status_code == 400

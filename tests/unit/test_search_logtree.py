"""Full-text search over the logtree JSON of each iteration: conversation messages and text nodes."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from click.testing import CliRunner

from rllog import RunLogger, logtree
from rllog._read.search import compile_pattern, search_run
from rllog.cli import main
from rllog.storage import open_storage


def _run(path):
    with RunLogger(path, code_diff=False, index=False) as lg:
        lg.log_metrics(0, {"loss": 1.0})
        with lg.iteration(0):
            logtree.text("outside any group: a needle in the trace")
            with logtree.group(1):
                with logtree.scope("Trajectory 0"):
                    logtree.conversation(
                        [
                            {"role": "user", "content": "what is 2+2?"},
                            {"role": "assistant", "content": [{"type": "text", "text": "a needle says 4"}]},
                        ]
                    )
                    logtree.table({"col": ["a needle in a table is not searched"]})
        with lg.evaluation("held out", 0):
            logtree.conversation([{"role": "assistant", "content": "eval needle"}])
    return path


def test_search_finds_text_nodes_and_conversation_messages_of_the_logtree(tmp_path):
    run = _run(tmp_path / "r")
    storage = open_storage(str(run))
    hits, files = search_run(storage, compile_pattern("needle"))
    assert files == 2  # the two logtrees: no rollout summaries here
    got = [
        (h["kind"], h["report"], h["split"], h["group"], h["field"], h["before"] + h["match"] + h["after"])
        for h in hits
    ]
    assert got == [
        (
            "logtree",
            "train_iteration_000000.html",
            "train",
            None,
            "text (p)",
            "outside any group: a needle in the trace",
        ),
        (
            "logtree",
            "train_iteration_000000.html",
            "train",
            1,
            "messages[1].content[0].text (assistant)",
            "a needle says 4",
        ),
        (
            "logtree",
            next(n for n in storage.list() if n.startswith("eval_") and n.endswith(".html")),
            "eval/" + hits[2]["eval_name"],
            None,
            "messages[0].content (assistant)",
            "eval needle",
        ),
    ]
    # roles are labels, not text; headings are text
    assert search_run(storage, compile_pattern("^assistant$", regex=True))[0] == []
    assert [h["field"] for h in search_run(storage, compile_pattern("Trajectory 0"))[0]] == ["text (h3)"]
    assert len(search_run(storage, compile_pattern("needle"), limit=2)[0]) == 2


def test_grep_prints_logtree_hits_with_their_report(tmp_path):
    run = _run(tmp_path / "r")
    out = CliRunner().invoke(main, ["grep", "says 4", str(run)])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        "train_iteration_000000.html:group 1:messages[1].content[0].text (assistant): a needle says 4"
    ]
    out = CliRunner().invoke(main, ["grep", "-E", r"eval ne+dle", str(run), "--json"])
    hit = json.loads(out.output)
    assert hit["kind"] == "logtree" and re.fullmatch(r"eval_held_out.*_iteration_000000\.html", hit["report"])


def test_serve_search_returns_logtree_hits_with_their_report(tmp_path):
    import pytest

    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from rllog.serve import create_app

    _run(tmp_path / "runs" / "r")
    client = TestClient(create_app([str(tmp_path / "runs")]), base_url="http://127.0.0.1")
    body = client.get("/api/search", params={"q": "says 4"}).json()
    (hit,) = body["hits"]
    assert hit["kind"] == "logtree" and hit["report"] == "train_iteration_000000.html" and hit["group"] == 1
    # the report the page links to is served
    report = client.get(f"/api/runs/{hit['run']}/files/{hit['report']}")
    assert report.status_code == 200 and "a needle says 4" in report.text


class _Ids(HTMLParser):
    """The text inside each element that has an id (nested ids each get their inner text)."""

    VOID = frozenset({"meta", "br", "img", "hr", "input", "link"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str | None] = []
        self.text: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        ident = dict(attrs).get("id")
        assert ident is None or ident not in self.text, f"id {ident} twice"
        if ident is not None:
            self.text[ident] = ""
        self.open.append(ident)

    def handle_endtag(self, tag):
        self.open.pop()

    def handle_data(self, data):
        for ident in self.open:
            if ident is not None:
                self.text[ident] += data


def test_every_logtree_hit_names_the_element_that_shows_it(tmp_path):
    """The anchor of a hit is an id in its report, on the element whose text holds the match:
    texts, code, section and group headings, details summaries, messages, long texts, bare
    strings of a hand-written logtree JSON."""
    from rllog.logtree._render import HEAD_CHARS

    with RunLogger(tmp_path / "r", code_diff=False, index=False) as lg:
        lg.log_metrics(0, {"loss": 1.0})
        with lg.iteration(0):
            logtree.text("needle-a in a paragraph")
            with logtree.scope("needle-b section title"):
                logtree.text("needle-c as code", code=True)
                with logtree.details("needle-d summary"):
                    logtree.text("x" * 100 + " needle-e " + "y" * (HEAD_CHARS * 5))
            for g in (0, 1):
                with logtree.group(g, title=f"needle-f group {g}"):
                    logtree.conversation(
                        [{"role": "user", "content": "q"}, {"role": "assistant", "content": f"needle-g {g}"}]
                    )
    storage = open_storage(str(tmp_path / "r"))
    hits, _ = search_run(storage, compile_pattern(r"needle-\w|Trajectory Details", regex=True))
    assert len(hits) == 10, [h["field"] for h in hits]
    parser = _Ids()
    parser.feed(storage.read("train_iteration_000000.html").decode())
    for h in hits:
        assert h["match"] in parser.text[h["anchor"]], (h["field"], h["anchor"])
    assert len({h["anchor"] for h in hits}) == 10
    # a logtree written by hand: a bare string in a container is anchored by its position
    from rllog.logtree._model import Node, TraceDoc, TraceView
    from rllog.logtree._render import render_html

    div = {"tag": "div", "attrs": {}, "children": ["a", "needle-z"]}
    details = {"tag": "section", "attrs": {}, "children": [{"tag": "h2", "attrs": {}, "children": ["T"]}]}
    doc = {
        "title": "t",
        "started_at": "x",
        "path": None,
        "root": {"tag": "body", "attrs": {}, "children": [div, details]},
    }
    (tmp_path / "r" / "train_iteration_000001_logtree.json").write_text(json.dumps(doc))
    hit = next(h for h in search_run(storage, compile_pattern("needle-z"))[0] if h["iteration"] == 1)

    def node(d):
        return Node(d["tag"], d["attrs"], [c if isinstance(c, str) else node(c) for c in d["children"]])

    view = TraceView(TraceDoc("t", "x", None, node(doc["root"])), [], (), 0, False, False)
    parser = _Ids()
    parser.feed(render_html(view))
    assert hit["anchor"] == "lt-1-1" and parser.text["lt-1-1"] == "needle-z"


def test_grep_searches_the_good_lines_of_a_damaged_file_and_says_what_it_skipped(tmp_path):
    # one damaged line in a rollout summaries file (or a damaged logtree) made grep skip the
    # whole file without a word: its hits were lost and "no match" looked like an answer
    run = tmp_path / "r"
    traj = {"steps": [{"ob_len": 1, "ac_len": 1, "reward": 1.0, "logs": {"answer": "the needle"}}]}
    with RunLogger(run, code_diff=False, index=False) as lg:
        lg.log_metrics(0, {"loss": 1.0})
        lg.log_rollouts(0, [[traj, traj]])
        with lg.iteration(1):
            logtree.text("a needle in the trace")
    summaries = run / "train_iteration_000000_rollout_summaries.jsonl"
    first, second = summaries.read_bytes().splitlines(keepends=True)
    summaries.write_bytes(first + b"\xff\xfe not a record\n" + second)
    (run / "train_iteration_000001_logtree.json").write_text("{not json")
    result = CliRunner().invoke(main, ["grep", "needle", str(run)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "train_iteration_000000_rollout_summaries.jsonl:group 0:traj 0:answer: the needle",
        "train_iteration_000000_rollout_summaries.jsonl:group 0:traj 1:answer: the needle",
    ]
    assert "warning: train_iteration_000000_rollout_summaries.jsonl line 2:" in result.stderr
    assert "warning: train_iteration_000001_logtree.json: not searched" in result.stderr

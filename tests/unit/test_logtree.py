"""Logtree: API behaviour, HTML structure (parsed, as a browser would see it), JSON, security."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
import warnings
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rllog import logtree
from rllog._format.codec import clean_text
from rllog._templates import environment, template_dir
from rllog.logtree._io import html_bytes
from rllog.logtree._render import MAX_HTML_CHARS
from rllog.storage import LocalStorage, open_storage

# a small DOM from the stdlib parser


class El:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: El | None) -> None:
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, El):
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[El]:
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag) and (cls is None or cls in (e.attrs.get("class") or "").split())
        ]

    def find(self, tag: str | None = None, cls: str | None = None) -> El:
        found = self.find_all(tag, cls)
        assert found, f"no <{tag} class={cls}> under <{self.tag}>"
        return found[0]

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)


VOID = {"meta", "br", "img", "hr", "input", "link"}


class DomParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.cur = El("#document", {}, None)

    def handle_starttag(self, tag, attrs):
        el = El(tag, dict(attrs), self.cur)
        self.cur.children.append(el)
        if tag not in VOID:
            self.cur = el

    def handle_endtag(self, tag):
        node = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"stray </{tag}>"
        assert self.cur is node, f"</{tag}> closes <{self.cur.tag}> implicitly"
        self.cur = node.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse(page: str) -> El:
    p = DomParser()
    p.feed(page)
    p.close()
    assert p.cur is p.root, f"unclosed <{p.cur.tag}>"
    return p.root


def find_conversations(node):  # the recipe from seed 000, verbatim in behaviour
    results = []
    if isinstance(node, dict):
        if node.get("data", {}).get("type") == "conversation":
            results.append(node["data"])
        for child in node.get("children", []):
            if isinstance(child, dict):
                results.extend(find_conversations(child))
    return results


def memory_storage():
    return open_storage(f"memory://logtree-{uuid.uuid4().hex}")


CONVO = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+3?"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "2 plus 3 is 5"},
            {"type": "text", "text": "5"},
            {"type": "tool_call", "tool_call": {"function": {"name": "calc", "arguments": '{"x": "2+3"}'}}},
            {"type": "image", "image": "data:image/png;base64,AAAA"},
        ],
    },
    {"role": "tool", "content": "5", "tool_call_id": "c1"},
]


def golden_trace() -> logtree.Trace:
    with logtree.open_trace("Train iteration 7", num_groups_to_log=2) as trace:
        logtree.text("intro line")
        with logtree.scope("Sampling"):
            for g in range(3):
                with logtree.group(g):
                    with logtree.scope("Trajectory 0"):
                        logtree.conversation(CONVO)
                        logtree.table(
                            [{"step": 0, "reward": 0.5}, {"step": 1, "reward": 1.0}], caption="Steps"
                        )
                        with logtree.details("Grader notes"):
                            logtree.text("all good", code=True)
                    logtree.trajectory_stats(
                        0, final_reward=1.0, steps=[{"ob_len": 10, "ac_len": 4, "reward": 0.5}]
                    )
    return trace


def test_golden_html_structure():
    dom = parse(golden_trace().to_html())
    html = dom.find("html")
    assert html.attrs["lang"] == "en"
    assert dom.find("title").text == "Train iteration 7"
    assert dom.find("meta").attrs == {"charset": "utf-8"}
    assert any(m.attrs.get("name") == "viewport" for m in dom.find_all("meta"))
    assert "lt-msg-user" in dom.find("style").text  # CSS inline
    # self-contained: no scripts, no external resources
    assert not dom.find_all("script") and not dom.find_all("link") and not dom.find_all("img")
    assert all(
        not (e.attrs.get("href") or "#").lstrip("#").strip() or e.attrs["href"].startswith("#")
        for e in dom.find_all("a")
    )
    main = dom.find("main", "lt-root")
    assert main.find("h1").text == "Train iteration 7"
    # header levels follow nesting: Sampling h2 > Group h3 > Trajectory h4
    sampling = main.find("section", "lt-section")
    assert sampling.children[0].tag == "h2" and sampling.children[0].text == "Sampling"
    groups = sampling.find_all("details", "lt-group")
    assert [g.attrs["id"] for g in groups] == ["group-0", "group-1"]  # group 2 >= num_groups_to_log
    assert all("open" in g.attrs for g in groups)
    summary = groups[0].children[0]
    assert summary.tag == "summary" and summary.find("h3").text == "Group 0"
    assert "1 trajectories" in summary.text
    traj = groups[0].find("section", "lt-section")
    assert traj.children[0].tag == "h4" and traj.children[0].text == "Trajectory 0"
    msgs = traj.find("div", "lt-conversation").find_all("div", "lt-msg")
    assert [m.attrs["class"].split()[1] for m in msgs] == [
        "lt-msg-system",
        "lt-msg-user",
        "lt-msg-assistant",
        "lt-msg-tool",
    ]
    assert [m.find("div", "lt-role").text for m in msgs] == ["system", "user", "assistant", "tool call c1"]
    assistant = msgs[2]
    assert assistant.find("details", "lt-thinking").find("div", "lt-code").text == "2 plus 3 is 5"
    assert assistant.find_all("div", "lt-text")[0].text == "5"
    call = assistant.find("div", "lt-tool-call")
    assert call.find("code").text == "calc" and call.find("div", "lt-code").text == '{\n  "x": "2+3"\n}'
    assert "image" in assistant.find("span", "lt-image").text
    table = traj.find("table")
    assert table.find("caption").text == "Steps"
    assert [th.text for th in table.find_all("th")] == ["step", "reward"]
    assert [[td.text for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")] == [
        ["0", "0.5"],
        ["1", "1"],
    ]
    det = traj.find("details", "lt-details")
    assert det.children[0].text == "Grader notes" and "open" not in det.attrs
    assert det.find("div", "lt-code").text == "all good"
    # Trajectory Details: every group, also the one without content
    td = main.find("section", "lt-trajectory-details")
    assert td.attrs["id"] == "trajectory-details" and td.find("h2").text == "Trajectory Details"
    tgroups = td.find_all("details", "lt-traj-group")
    assert len(tgroups) == 3
    assert (
        "stats only" in tgroups[2].find("summary").text and "full content" in tgroups[0].find("summary").text
    )
    row = [td_.text for td_ in tgroups[2].find("tbody").find("tr").find_all("td")]
    assert row[:6] == ["0", "1.5", "1", "1", "10", "4"]


def test_golden_json_structure():
    doc = json.loads(golden_trace().to_json())
    assert list(doc) == ["title", "started_at", "path", "root"]
    assert doc["title"] == "Train iteration 7" and doc["path"] is None

    def walk(node):
        assert set(node) <= {"tag", "attrs", "children", "data"} and {"tag", "attrs", "children"} <= set(node)
        assert all(isinstance(v, str) for v in node["attrs"].values())
        for c in node["children"]:
            assert isinstance(c, (str, dict))
            if isinstance(c, dict):
                walk(c)

    walk(doc["root"])
    assert doc["root"]["children"][0] == {"tag": "p", "attrs": {"class": "lt-p"}, "children": ["intro line"]}
    convs = find_conversations(doc["root"])
    assert len(convs) == 2 and all(c["messages"] == CONVO for c in convs)
    details = doc["root"]["children"][-1]
    assert details["attrs"]["id"] == "trajectory-details"
    data = details["children"][1]["data"]
    assert data["type"] == "trajectory_details" and data["num_groups_to_log"] == 2
    assert [(t["group_idx"], t["traj_idx"]) for t in data["trajectories"]] == [(0, 0), (1, 0), (2, 0)]
    assert data["trajectories"][0] == {
        "group_idx": 0,
        "traj_idx": 0,
        "total_reward": 1.5,
        "final_reward": 1.0,
        "trajectory_metrics": {},
        "steps": [{"step_idx": 0, "ob_len": 10, "ac_len": 4, "reward": 0.5, "episode_done": True}],
    }


def test_no_trace_is_a_noop_and_detectable():
    assert logtree.current() is None and not logtree.is_active()
    with logtree.scope("x") as sec:
        logtree.text("dropped")
        logtree.conversation("not even checked")
        logtree.table(object())
        logtree.trajectory_stats(0)
        with logtree.group(3), logtree.details("d"):
            assert not logtree.is_active()
    assert sec.node is None

    @logtree.scope
    def f(x):
        return x + 1

    assert f(1) == 2
    with logtree.open_trace("t") as trace:
        assert logtree.is_active() and logtree.current() is trace
        assert f(1) == 2
    assert trace.root.children[0].children[0].children == ["f"]
    assert logtree.current() is None


def test_disabled_groups_keep_stats_only():
    with logtree.open_trace("t", num_groups_to_log=1) as trace, logtree.group(1) as sec:
        assert not logtree.is_active() and sec.group_idx == 1
        logtree.text("hidden")
        with logtree.scope("inner"):
            logtree.conversation(CONVO)
            logtree.trajectory_stats(5, total_reward=2.0)
    assert trace.root.children == []
    assert [(t["group_idx"], t["traj_idx"], t["total_reward"]) for t in trace.trajectories] == [(1, 5, 2.0)]


def test_exception_recorded_once_reraised_and_report_written():
    storage = memory_storage()
    with pytest.raises(ZeroDivisionError), logtree.iteration_trace(storage, 2), logtree.scope("Outer"):
        with logtree.scope("Inner"):
            logtree.text("before")
            1 / 0  # noqa: B018
    doc = json.loads(storage.read("train_iteration_000002_logtree.json"))
    inner = doc["root"]["children"][0]["children"][1]
    assert inner["children"][0]["children"] == ["Inner"]
    exc = inner["children"][2]["data"]
    assert exc["type"] == "exception" and exc["exc_type"] == "ZeroDivisionError"
    assert exc["message"] == "division by zero" and "1 / 0" in exc["traceback"]
    assert json.dumps(doc).count('"exception"') == 1
    dom = parse(storage.read("train_iteration_000002.html").decode())
    box = dom.find("details", "lt-exception")
    assert box.find("summary").text == "Exception: ZeroDivisionError: division by zero"
    assert "Traceback" in box.find("div", "lt-code").text


def test_exception_outside_scopes_recorded_at_top():
    with pytest.raises(KeyError), logtree.open_trace("t") as trace:
        logtree.text("before")
        raise KeyError("k")
    assert trace.root.children[0].data["exc_type"] == "KeyError"


def test_exception_in_the_iteration_body_is_in_the_written_report(tmp_path):
    from rllog import RunLogger

    with RunLogger(tmp_path, code_diff=False) as logger:
        with pytest.raises(ValueError, match="bad batch"), logger.iteration(3):
            logtree.text("sampled")
            raise ValueError("bad batch")
    doc = json.loads((tmp_path / "train_iteration_000003_logtree.json").read_text())
    first = doc["root"]["children"][0]["data"]
    assert (first["type"], first["exc_type"], first["message"]) == ("exception", "ValueError", "bad batch")
    assert 'raise ValueError("bad batch")' in first["traceback"]
    main = parse((tmp_path / "train_iteration_000003.html").read_text()).find("main")
    box = main.find("details", "lt-exception")
    assert box.find("summary").text == "Exception: ValueError: bad batch"
    body = [e for e in main.find("div", "lt-card").children if not isinstance(e, str)]
    assert [e.tag for e in body[:3]] == ["header", "details", "p"]  # the exception before the content


def test_json_path_is_normalised(tmp_path):
    storage = LocalStorage(str(tmp_path / "a" / ".." / "run"))
    with logtree.open_trace("t") as trace:
        pass
    logtree.write_trace(storage, trace, 1)
    path = json.loads(storage.read("train_iteration_000001_logtree.json"))["path"]
    assert path == str(tmp_path / "run" / "train_iteration_000001.html") and ".." not in path
    assert logtree._normal_url("gs://b/x/../run/f.html") == "gs://b/run/f.html"


def test_long_text_folded_in_html_full_in_json():
    reply = "".join(f"line {i} of a very long reply\n" for i in range(8_000))  # ~230 KB
    assert len(reply) > 200_000
    with logtree.open_trace("t") as trace:
        logtree.conversation([{"role": "assistant", "content": reply}])
        logtree.text(reply)
    page = trace.to_html()
    assert len(page) < 2 * MAX_HTML_CHARS + 30_000
    dom = parse(page)
    block = dom.find("div", "lt-msg").find("div", "lt-text")
    assert block.children[0] == reply[:2000]
    more = block.find("details", "lt-more")
    assert more.find("summary").text == f"show {MAX_HTML_CHARS - 2000:,} more characters"
    assert block.find("p", "lt-omitted").text.startswith(f"… {len(reply) - MAX_HTML_CHARS:,} more characters")
    doc = json.loads(trace.to_json())
    assert find_conversations(doc["root"])[0]["messages"][0]["content"] == reply
    assert doc["root"]["children"][1]["children"] == [reply]


def test_table_shapes_and_errors():
    with logtree.open_trace("t") as trace:
        logtree.table([{"a": 1}, {"a": 2, "b": "x"}])
        logtree.table({"a": [1, 2], "b": [3.5, None]})
        logtree.table({"lr": 0.1, "model": "m"})
        logtree.table([(1, 2), (3, 4)], columns=["x", "y"])
        np = pytest.importorskip("numpy")
        logtree.table({"v": np.arange(2)}, caption="np")
        # odd shapes never raise into the loop: warned once, shown as well as they go
        with pytest.warns(RuntimeWarning, match="different lengths") as warned:
            logtree.table({"a": [1], "b": [1, 2]})
            logtree.table({"a": [1], "b": 2})
            logtree.table([[1]], columns=["a", "b"])
            logtree.table(42)
    assert len(warned) == 1
    tables = [n.data for n in trace.root.children]
    assert [(t["columns"], t["rows"]) for t in tables] == [
        (["a", "b"], [[1, None], [2, "x"]]),
        (["a", "b"], [[1, 3.5], [2, None]]),
        (["key", "value"], [["lr", 0.1], ["model", "m"]]),
        (["x", "y"], [[1, 2], [3, 4]]),
        (["v"], [[0], [1]]),
        (["a", "b"], [[1, 1], [None, 2]]),
        (["key", "value"], [["a", "[1]"], ["b", 2]]),
        (["a", "b"], [[1, None]]),
        (["value"], [[42]]),
    ]
    assert type(tables[4]["rows"][0][0]) is int


def test_odd_content_warns_once_never_raises_and_shows_a_repr():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

        def model_dump(self):
            raise RuntimeError("no dump")

    with pytest.warns(RuntimeWarning, match="logtree.text expects a str, got bytes") as warned:
        with logtree.open_trace("t") as trace:
            logtree.text(b"bytes")
            logtree.conversation(
                [{"role": "user", "content": "x"}, {"content": "y"}, "plain", {"role": "user", "content": 7}]
            )
            logtree.conversation("hello")
            logtree.conversation({"role": "user", "content": "one"})
            logtree.conversation([Broken()])
            logtree.html(3)
            with logtree.scope(5):
                logtree.table([[1, 2]], columns=["a"], caption=1.5)
    assert len(warned) == 1 and "warned once per report" in str(warned[0].message)
    kids = trace.root.children
    assert kids[0].children == ["b'bytes'"]
    assert kids[1].data["messages"] == [
        {"role": "user", "content": "x"},
        {"content": "y"},
        "plain",
        {"role": "user", "content": 7},
    ]
    assert kids[2].data["messages"] == ["hello"] and kids[3].data["messages"] == [
        {"role": "user", "content": "one"}
    ]
    assert kids[4].data["messages"] == ["<list: repr() failed: RuntimeError>"]
    assert kids[5].children == ["3"] and kids[6].children[0].children == ["5"]
    assert kids[6].children[1].data == {
        "type": "table",
        "columns": ["a", ""],
        "rows": [[1, 2]],
        "caption": "1.5",
    }
    dom = parse(trace.to_html())
    convs = dom.find_all("div", "lt-conversation")
    assert [m.find("div", "lt-role").text for m in convs[0].find_all("div", "lt-msg")] == [
        "user",
        "?",
        "? not a message dict",
        "user",
    ]
    assert convs[0].find_all("div", "lt-msg")[3].find("div", "lt-code").text == "7"
    assert convs[1].find("div", "lt-code").text == '"hello"'


def test_openai_tool_call_messages_render_and_stay_as_logged():
    call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_9", "name": "get_weather", "content": '{"temp_c": 3}'},
        {"role": "assistant", "content": "3 °C."},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with logtree.open_trace("t") as trace:
            logtree.conversation(messages)
    assert json.loads(trace.to_json())["root"]["children"][0]["data"]["messages"] == messages
    msgs = parse(trace.to_html()).find("div", "lt-conversation").find_all("div", "lt-msg")
    assert [m.find("div", "lt-role").text for m in msgs] == [
        "user",
        "assistant",
        "tool result of get_weather · call call_9",
        "assistant",
    ]
    tc = msgs[1].find("div", "lt-tool-call")
    assert tc.find("code").text == "get_weather" and tc.find("span", "lt-note").text == "id call_9"
    assert tc.find("div", "lt-code").text == '{\n  "city": "Oslo"\n}'
    assert not msgs[1].find_all("div", "lt-text")  # content None: no text box
    assert msgs[2].find("div", "lt-text").text == '{"temp_c": 3}'


def test_bad_structure_fails_fast():
    with logtree.open_trace("t"):
        with pytest.raises(ValueError, match="needs a group"):
            logtree.trajectory_stats(0, total_reward=1.0)
        with pytest.raises(TypeError, match="group_idx must be an int"):
            logtree.group("0")
        with pytest.raises(TypeError, match="total_reward must be a number"):
            logtree.trajectory_stats(0, group_idx=0, total_reward="high")


def test_decorator_sync_and_async_and_explicit_handles():
    @logtree.scope("Rollout")
    async def rollout(i):
        await asyncio.sleep(0)
        logtree.text(f"rollout {i}")
        return i

    trace = logtree.Trace("explicit")
    with trace.scope("A") as a:
        a.text("in A")
        with a.details("D", open=True) as d:
            d.table({"k": 1})
    trace.text("top")
    assert logtree.current() is None  # nothing bound by explicit use... outside the with
    with trace.bind():
        assert asyncio.run(rollout(3)) == 3
    doc = trace.to_dict()
    kids = doc["root"]["children"]
    assert kids[0]["children"][1] == {"tag": "p", "attrs": {"class": "lt-p"}, "children": ["in A"]}
    assert kids[0]["children"][2]["attrs"] == {"class": "lt-details", "open": ""}
    assert kids[1]["children"] == ["top"]
    assert kids[2]["children"][0]["children"] == ["Rollout"] and kids[2]["children"][1]["children"] == [
        "rollout 3"
    ]


def test_trajectory_records_from_rollout_summaries_replace_by_index():
    trace = logtree.Trace("t")
    with trace.group(0) as g:
        g.trajectory_stats(0, total_reward=0.0, ob_len=5, ac_len=6)
    trace.add_trajectories(
        [
            {
                "schema_version": 1,
                "split": "train",
                "group_idx": 0,
                "traj_idx": 0,
                "total_reward": 1.0,
                "final_reward": 1.0,
                "trajectory_metrics": {"correct": 1.0},
                "steps": [
                    {
                        "step_idx": 0,
                        "ob_len": 7,
                        "ac_len": 8,
                        "reward": 0.0,
                        "episode_done": True,
                        "metrics": {},
                        "logs": {},
                    }
                ],
            }
        ]
    )
    (rec,) = trace.trajectories
    assert (
        rec["total_reward"] == 1.0
        and rec["trajectory_metrics"] == {"correct": 1.0}
        and rec["steps"][0]["ob_len"] == 7
    )


def test_nonfinite_values_follow_strict_json():
    for strict, token in [(False, b"NaN"), (True, b"null")]:
        trace = logtree.Trace("t", strict_json=strict)
        trace.table({"x": float("nan")})
        trace.add_trajectories([{"group_idx": 0, "traj_idx": 0, "total_reward": float("inf")}])
        raw = trace.to_json()
        assert b'["x",' + token + b"]" in raw
        assert (b'"total_reward":' + (b"Infinity" if not strict else b"null")) in raw


def test_write_to_memory_and_local(tmp_path):
    for storage in (memory_storage(), LocalStorage(tmp_path / "run")):
        with logtree.iteration_trace(storage, 12, eval_name="test") as trace, logtree.group(0):
            logtree.conversation(CONVO)
        assert storage.list() == [
            "eval_test_iteration_000012.html",
            "eval_test_iteration_000012_logtree.json",
        ]
        doc = json.loads(storage.read("eval_test_iteration_000012_logtree.json"))
        assert doc["path"] == f"{storage.url}/eval_test_iteration_000012.html" == trace.path
        assert doc["title"] == "Evaluation test, iteration 12"
        assert find_conversations(doc["root"])[0]["messages"] == CONVO
        assert (
            parse(storage.read("eval_test_iteration_000012.html").decode("utf-8")).find("title").text
            == doc["title"]
        )


@pytest.mark.parametrize(
    "name", ["../../x", "a/b", "CON", "", "x" * 300, "/abs", "nul\x00", "..", "Test", "test"]
)
def test_eval_names_stay_inside_log_path(tmp_path, name):
    storage = LocalStorage(tmp_path / "run")
    with logtree.iteration_trace(storage, 1, eval_name=name):
        logtree.text("x")
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) == 2 and all(p.parent == tmp_path / "run" for p in files)
    assert all(len(p.name) < 120 and p.name.startswith("eval_") for p in files)


def test_eval_names_distinct(tmp_path):
    storage = LocalStorage(tmp_path)
    names = ["../../x", "a/b", "a_b", "CON", "con", "", "x" * 300, "x" * 301, "Test", "test"]
    for n in names:
        with logtree.iteration_trace(storage, 0, eval_name=n):
            logtree.text(n)
    assert len(storage.list()) == 2 * len(names)


def test_write_failure_warns_and_keeps_body_exception():
    class Broken:
        url = "broken://"

        def write(self, name, data):
            raise OSError("disk full")

    seen = []
    with pytest.raises(RuntimeError, match="body"):
        with logtree.iteration_trace(Broken(), 0, warn=lambda kind, msg: seen.append((kind, msg))):
            raise RuntimeError("body")
    assert (
        seen
        and seen[0][0] == "logtree_write"
        and "train_iteration_000000.html" in seen[0][1]
        and "disk full" in seen[0][1]
    )
    with pytest.warns(RuntimeWarning, match="was not written"), logtree.iteration_trace(Broken(), 0):
        pass


def test_templates_found_and_one_environment():
    assert (template_dir() / "logtree.html.j2").is_file()
    assert environment() is environment()
    assert environment().autoescape is True


# security

PAYLOADS = [
    "<script>alert(1)</script>",
    "</script><script>alert(2)</script>",
    "<img src=x onerror=alert(3)>",
    '<a href="javascript:alert(4)">click</a>',
    '" onmouseover="alert(5)" x=\'',
    "</textarea></style></details></div></main><h1>fake</h1>",
    "<!-- comment --> <![CDATA[ x ]]> &amp; &lt;",
    "nul\x00byte",
    "lone \ud800 surrogate \udfff end",
    "{{ 7*7 }} {% raw %}",
]


def _visible(s: str) -> str:
    return clean_text(s.replace("\x00", "\u2400"))  # lone surrogates shown as U+FFFD (marked)


def _hostile_trace(p: str) -> logtree.Trace:
    with logtree.open_trace(p, num_groups_to_log=1) as trace:
        with logtree.scope(p):
            with logtree.group(0, title=p):
                logtree.text(p)
                logtree.text(p, code=True)
                logtree.conversation(
                    [
                        {"role": p, "content": p},
                        {
                            "role": "assistant",
                            "content": [{"type": "thinking", "thinking": p}, {"type": "text", "text": p}],
                        },
                        {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": [{"function": {"name": p, "arguments": p}}],
                        },
                    ]
                )
                logtree.table([{p: p}], caption=p)
                with logtree.details(p):
                    logtree.text(p)
                logtree.trajectory_stats(0, total_reward=1.0, metrics={p: p})
                raise_and_record(p)
    return trace


def raise_and_record(p: str) -> None:
    try:
        with logtree.scope("err"):
            raise ValueError(p)
    except ValueError:
        pass


EXPECTED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "main", "div", "header", "h1", "h2", "h3", "h4", "p", "a", "nav",
    "section", "details", "summary", "span", "code", "table", "caption", "thead", "tbody", "tr", "th", "td",
    "mark",
}  # fmt: skip


def check_inert(p: str, trace: logtree.Trace) -> None:
    raw = trace.to_json()
    page = html_bytes(trace).decode("utf-8")  # always valid UTF-8
    dom = parse(page)
    tags = {e.tag for e in dom.iter()} - {"#document"}
    assert tags <= EXPECTED_TAGS, tags - EXPECTED_TAGS
    for e in dom.iter():
        assert not any(k.startswith("on") for k in e.attrs), e.attrs
        assert not (e.attrs.get("href") or "").lower().startswith("javascript")
    assert not dom.find_all("h1")[1:], "injected heading"
    visible = _visible(p)
    body_text = dom.find("main").text
    assert body_text.count(visible) >= 8
    assert dom.find("title").text == visible
    # JSON: exactly the logged strings back (lone surrogates as U+FFFD, the codec's one rule)
    doc = json.loads(raw)
    p = clean_text(p)
    assert doc["title"] == p
    assert find_conversations(doc["root"])[0]["messages"][0] == {"role": p, "content": p}
    assert doc["root"]["children"][-1]["children"][1]["data"]["trajectories"][0]["trajectory_metrics"] == {
        p: p
    }


@pytest.mark.parametrize("p", PAYLOADS)
def test_model_text_is_inert_in_html_and_exact_in_json(p):
    check_inert(p, _hostile_trace(p))


FRAGMENTS = [
    "<",
    ">",
    "&",
    '"',
    "'",
    "=",
    "/",
    "script",
    "img",
    "on",
    "javascript:",
    "\x00",
    "\ud800",
    "{{",
    "-->",
    "&lt;",
    " ",
]
HOSTILE = st.lists(
    st.sampled_from(FRAGMENTS) | st.text(st.characters(exclude_categories=()), max_size=5),
    min_size=1,
    max_size=12,
).map("".join)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(exclude_categories=()), min_size=1, max_size=40) | HOSTILE.filter(bool))
def test_arbitrary_text_property(p):
    check_inert(p, _hostile_trace(p))


def test_demo_writes_reports_every_iteration_and_periodic_evaluation(tmp_path):
    from rllog._demo import DemoConfig, run_demo

    cfg = DemoConfig(
        log_path=str(tmp_path),
        n_batches=3,
        eval_every=2,
        groups_per_batch=6,
        group_size=4,
        num_groups_to_log=2,
    )
    run_demo(cfg, quiet=True)
    names = {p.name for p in tmp_path.iterdir()}
    for i in range(3):
        assert {f"train_iteration_{i:06d}.html", f"train_iteration_{i:06d}_logtree.json"} <= names
    evals = sorted(n for n in names if n.startswith("eval_") and not n.endswith("_rollout_summaries.jsonl"))
    assert evals == [f"eval_test_iteration_{i:06d}{s}" for i in (0, 2) for s in (".html", "_logtree.json")]
    doc = json.loads((tmp_path / "train_iteration_000001_logtree.json").read_text())
    convs = find_conversations(doc["root"])
    assert len(convs) == 2 * 4  # num_groups_to_log groups x group_size
    assert all(
        c["messages"][0]["role"] == "user" and c["messages"][0]["content"].startswith("What is ")
        for c in convs
    )
    trajs = doc["root"]["children"][-1]["children"][1]["data"]["trajectories"]
    assert len(trajs) == 6 * 4 and {t["group_idx"] for t in trajs} == set(range(6))
    assert all(t["final_reward"] in (0.0, 0.1, 1.0) and t["steps"][0]["ac_len"] >= 1 for t in trajs)
    ev = json.loads((tmp_path / "eval_test_iteration_000002_logtree.json").read_text())
    assert (
        len(ev["root"]["children"][-1]["children"][1]["data"]["trajectories"]) == 400
    )  # 100 prompts x 4 samples
    dom = parse((tmp_path / "train_iteration_000002.html").read_text())
    assert (
        len(dom.find_all("details", "lt-group")) == 2 and len(dom.find_all("details", "lt-traj-group")) == 6
    )


def test_written_report_links_index_and_neighbouring_iterations(tmp_path):
    storage = LocalStorage(str(tmp_path))
    for i in (0, 1):
        with logtree.iteration_trace(storage, i):
            logtree.text("x")
    with logtree.iteration_trace(storage, 1, eval_name="held out"):
        pass

    def nav(name):
        return [
            (a.text, a.attrs["href"])
            for a in parse((tmp_path / name).read_text()).find("nav", "lt-nav").find_all("a")
        ]

    assert nav("train_iteration_000000.html") == [
        ("Run index", "index.html"),
        ("iteration 1 →", "train_iteration_000001.html"),
    ]
    assert nav("train_iteration_000001.html") == [
        ("Run index", "index.html"),
        ("← iteration 0", "train_iteration_000000.html"),
        ("iteration 2 →", "train_iteration_000002.html"),
    ]
    eval_page = next(p.name for p in tmp_path.glob("eval_*_iteration_000001.html"))
    assert nav(eval_page) == [("Run index", "index.html")]


def test_wide_table_scrolls_and_keeps_headers_and_numbers_whole():
    with logtree.open_trace("t") as trace:
        logtree.table([{f"metric_name_{j}": 0.123456789 * j for j in range(30)}])
    dom = parse(trace.to_html())
    assert dom.find("div", "lt-table-wrap").find("table")
    cells = dom.find("table").find_all("td")
    assert all(c.attrs.get("class") == "lt-num" for c in cells) and cells[1].text == "0.123457"
    css = dom.find("style").text
    assert re.search(r"\.lt-table-wrap \{[^}]*overflow-x: auto", css)
    assert re.search(r"th \{[^}]*white-space: nowrap", css) and re.search(
        r"td\.lt-num \{[^}]*white-space: nowrap", css
    )
    assert "overflow-wrap: anywhere" not in re.search(r"th, td \{[^}]*\}", css).group(0)

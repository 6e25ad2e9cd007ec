"""RunLogger: config.json, code.diff, checkpoints, resume, torn lines, ranks, failures."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import warnings
import zlib
from pathlib import Path

import chz
import pytest

import rllog
from rllog import RunLogger, load_config
from rllog._format.records import REDACTED
from rllog._write.config import config_to_dict
from rllog.storage import LocalStorage

REPO = Path(__file__).resolve().parents[2]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- config.json ---------------------------------------------------------------------


class Loss(enum.Enum):
    PPO = "ppo"
    IMPORTANCE_SAMPLING = "importance_sampling"


def reward_fn(x: float) -> float:
    return x


@chz.chz
class Optim:
    learning_rate: float = 1e-4
    loss_fn: Loss = Loss.PPO


@chz.chz
class TrainConfig:
    model_name: str
    optim: Optim
    log_path: pathlib.Path = pathlib.Path("/tmp/run")
    tags: tuple[str, ...] = ()
    max_tokens: int = 2048
    wandb_api_key: str = "sk-secret"
    hf_token: str | None = None


def test_chz_config_written_readably_and_rebuilt(tmp_path: Path) -> None:
    cfg = TrainConfig(
        model_name="Qwen/Qwen3-4B",
        optim=Optim(learning_rate=3e-5, loss_fn=Loss.IMPORTANCE_SAMPLING),
        tags=("a", "b"),
        hf_token="hf_xyz",
    )
    with RunLogger(tmp_path, config=cfg, code_diff=False):
        pass
    text = (tmp_path / "config.json").read_text()
    assert "sk-secret" not in text and "hf_xyz" not in text
    data = json.loads(text)
    assert data == {
        "model_name": "Qwen/Qwen3-4B",
        "optim": {"learning_rate": 3e-5, "loss_fn": "IMPORTANCE_SAMPLING"},
        "log_path": "/tmp/run",
        "tags": ["a", "b"],
        "max_tokens": 2048,
        "wandb_api_key": REDACTED,
        "hf_token": REDACTED,
    }
    assert text.startswith('{\n  "model_name"')  # indented
    with pytest.warns(RuntimeWarning, match="hf_token, wandb_api_key came back as '<redacted>'"):
        rebuilt = load_config(tmp_path, TrainConfig)
    assert rebuilt == chz.replace(cfg, wandb_api_key=REDACTED, hf_token=REDACTED)
    assert rebuilt.optim.loss_fn is Loss.IMPORTANCE_SAMPLING and isinstance(rebuilt.log_path, pathlib.Path)


@chz.chz
class Evaluator:
    name: str = "test"
    every: int = 10


@chz.chz
class MathEvaluator(Evaluator):
    digits: int = 2


@chz.chz
class NestedConfig:
    evaluators: list[Evaluator]
    by_name: dict[str, Evaluator]
    default: Evaluator
    anything: object = None
    stop: str | None = None
    pair: tuple[int, str] = (1, "a")


@chz.chz
class Renamed:
    learning_rate: float = 1e-3


def test_load_config_says_what_the_class_has_no_field_for(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"lr": 0.5, "optim": {"beta": 0.9}}')
    with pytest.warns(RuntimeWarning, match="no field for, left out .*: lr, optim"):
        assert load_config(tmp_path, Renamed) == Renamed()


def test_secrets_in_urls_and_under_secret_names_cycles_are_marked() -> None:
    config: dict = {
        "db_url": "postgres://admin:s3cret@db:5432/x",
        "credentials": {"user": "u", "pass": "p", "n": 3},
        "mirror": "https://host/x",
    }
    config["self"] = config
    out = config_to_dict(config)
    assert out["db_url"] == f"postgres://admin:{REDACTED}@db:5432/x" and out["mirror"] == "https://host/x"
    assert out["credentials"] == {"user": REDACTED, "pass": REDACTED, "n": 3}
    assert out["self"] == "<cycle: this dict contains itself>"


def test_nested_and_polymorphic_chz_configs_are_rebuilt(tmp_path: Path) -> None:
    cfg = NestedConfig(
        evaluators=[Evaluator(name="a"), MathEvaluator(name="b", digits=3)],
        by_name={"x": Evaluator(every=5)},
        default=MathEvaluator(),
        anything=Evaluator(name="any"),
        stop="None",
        pair=(2, "b"),
    )
    with RunLogger(tmp_path, config=cfg, code_diff=False):
        pass
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["evaluators"][0] == {"name": "a", "every": 10}  # declared class: no marker
    assert data["evaluators"][1]["__chz_type__"] == f"{__name__}:MathEvaluator"
    assert data["default"]["__chz_type__"] == f"{__name__}:MathEvaluator"
    rebuilt = load_config(tmp_path, NestedConfig)
    assert rebuilt == cfg and type(rebuilt.default) is MathEvaluator and rebuilt.stop == "None"


@dataclasses.dataclass
class DC:
    lr: float
    fn: object
    cls: type
    path: pathlib.Path
    password: str
    nested: dict


def test_other_config_kinds_never_raise_on_odd_values() -> None:
    import pydantic

    class PM(pydantic.BaseModel):
        lr: float = 0.1
        openai_api_key: str = "sk-x"
        num_tokens: int = 5

    got = config_to_dict(
        DC(lr=0.5, fn=reward_fn, cls=Optim, path=Path("/x"), password="p", nested={"s": {1, 2}, "b": b"\x00"})
    )
    assert got == {
        "lr": 0.5,
        "fn": f"{reward_fn.__module__}:reward_fn",
        "cls": f"{Optim.__module__}:Optim",
        "path": "/x",
        "password": REDACTED,
        "nested": {"s": [1, 2], "b": "<1 bytes>"},
    }
    assert config_to_dict(PM()) == {"lr": 0.1, "openai_api_key": REDACTED, "num_tokens": 5}
    ns = argparse.Namespace(lr=1.0, token="abc", max_tokens=10, fn=len, loss=Loss.PPO)
    assert config_to_dict(ns) == {
        "lr": 1.0,
        "token": REDACTED,
        "max_tokens": 10,
        "fn": "builtins:len",
        "loss": "PPO",
    }
    assert config_to_dict({"a": float("nan"), "lam": lambda x: x})["lam"].endswith("<lambda>")
    with pytest.raises(rllog.ConfigError, match="got list"):
        config_to_dict([1, 2])


def test_config_never_leaks_secrets_and_never_raises() -> None:
    import types

    import numpy as np
    import pydantic

    secret = "sk-SECRET-1234567890abc"

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

        @property
        def bad(self) -> int:
            raise ValueError("no")

    class Hostile:
        def __getattr__(self, name: str) -> None:
            raise KeyError(name)

    class Settings(pydantic.BaseModel):
        key: pydantic.SecretStr = pydantic.SecretStr(secret)

    deep: dict = {}
    cur = deep
    for _ in range(3000):
        cur["a"] = {}
        cur = cur["a"]
    config = {
        "client": types.SimpleNamespace(api_key=secret, timeout=30),
        "headers": {"Authorization": f"Bearer {secret}"},
        "api_keys": [secret],
        "wandb_key": secret,
        "note": f"call with token={secret}",
        "free": f"key {secret} here",
        "settings": Settings(),
        "broken": Broken(),
        "hostile": Hostile(),
        "weights": np.zeros((3000, 3000), np.float32),
        "small": np.arange(3),
        "stop_tokens": ["</s>"],
        "max_tokens": 512,
        "deep": deep,
    }
    out = config_to_dict(config)
    assert secret not in json.dumps(out) and "SECRET" not in json.dumps(out)
    assert out["client"] == {"api_key": REDACTED, "timeout": 30}
    assert out["headers"] == {"Authorization": REDACTED} and out["api_keys"] == [REDACTED]
    assert out["note"] == f"call with token={REDACTED}" and out["free"] == f"key {REDACTED} here"
    assert out["settings"] == {"key": REDACTED}
    assert out["hostile"] == "<unrepresentable Hostile: KeyError>"
    assert out["weights"] == "<ndarray shape (3000, 3000) dtype float32>" and out["small"] == [0, 1, 2]
    assert out["stop_tokens"] == ["</s>"] and out["max_tokens"] == 512
    assert isinstance(out["broken"], str)


def test_changed_config_keeps_the_old_file(tmp_path: Path) -> None:
    with RunLogger(tmp_path, config={"lr": 1}, code_diff=False) as logger:
        logger.log_config({"lr": 1})
        assert sorted(p.name for p in tmp_path.glob("config*.json")) == ["config.json"]
        logger.log_config({"lr": 2})
        logger.log_config({"lr": 3})  # within the same second: each old config keeps its own copy
    names = sorted(p.name for p in tmp_path.glob("config*.json"))
    assert len(names) == 3 and json.loads((tmp_path / "config.json").read_text()) == {"lr": 3}
    olds = sorted(json.loads((tmp_path / n).read_text())["lr"] for n in names if n != "config.json")
    assert olds == [1, 2]


# -- code.diff -------------------------------------------------------------------------


def run_script(script: str, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    path = cwd / "train.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run(
        [sys.executable, str(path), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def test_code_diff_has_commit_diff_and_untracked_files(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)
    git("init", "-q", "-b", "main")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "init")
    (repo / "model.py").write_text("x = 1\n")
    git("add", "model.py")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "model")
    (repo / "model.py").write_text("x = 2\n")  # unstaged
    (repo / "staged.py").write_text("y = 1\n")
    git("add", "staged.py")
    (repo / "scratch.txt").write_text("notes\n")  # untracked
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    run = tmp_path / "run"
    out = run_script(
        f"""
        from rllog import RunLogger
        with RunLogger({str(run)!r}) as logger:
            logger.log_metrics(0, {{"a": 1}})
    """,
        repo,
    )
    assert out.returncode == 0, out.stderr
    diff = (run / "code.diff").read_text()
    assert f"# commit: {commit} (branch main)" in diff
    assert "-x = 1\n+x = 2" in diff and "+y = 1" in diff
    assert "# untracked files (2):\n#   scratch.txt\n#   train.py" in diff


def test_code_diff_outside_git_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    out = run_script(
        f"""
        from rllog import RunLogger
        RunLogger({str(run)!r}).close()
    """,
        tmp_path,
        env={"GIT_CEILING_DIRECTORIES": str(tmp_path.parent)},
    )
    assert out.returncode == 0, out.stderr
    text = (run / "code.diff").read_text()
    assert text.startswith(
        f"# rllog code.diff: {tmp_path} is not in a git repository; no code state recorded\n# host: "
    )
    assert f"# command: {sys.executable} {tmp_path / 'train.py'}\n" in text
    assert f"# working directory: {tmp_path}\n" in text and "\n# started: 20" in text


def test_code_diff_is_bounded(tmp_path: Path) -> None:
    from rllog._write.codediff import code_diff

    repo = tmp_path / "big"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "f.txt").write_text("a\n" * 10)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"], cwd=repo, check=True
    )
    (repo / "f.txt").write_text("b\n" * 100_000)
    data = code_diff(repo, max_bytes=10_000)
    assert 10_000 <= len(data) < 10_200 and b"# rllog: diff cut at 10000 bytes;" in data


def test_code_diff_keeps_bytes_cuts_at_lines_and_handles_unborn_and_detached_heads(tmp_path: Path) -> None:
    from rllog._write.codediff import code_diff

    repo = tmp_path / "r"
    repo.mkdir()
    git = lambda *a: subprocess.run(
        ["git", "-c", "user.email=a@b", "-c", "user.name=a", *a],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    git("init", "-q")
    (repo / "latin1.py").write_bytes(b"# caf\xe9\n")
    git("add", "latin1.py")
    unborn = code_diff(repo)
    assert b"# commit: none (no commits yet)" in unborn and b"+# caf\xe9" in unborn  # staged, raw bytes
    git("commit", "-qm", "one")
    (repo / "latin1.py").write_bytes(b"# caf\xe9\n" + b"".join(b"line %d \xe9\n" % i for i in range(2000)))
    git("checkout", "-q", "--detach")
    data = code_diff(repo, max_bytes=2000)
    assert b"(detached HEAD)" in data and b"+line 0 \xe9\n" in data
    body, note = data.rsplit(b"# rllog: diff cut at 2000 bytes; ", 1)
    assert body.endswith(b"\n") and len(body) <= 2000 and note.endswith(b" bytes left out\n")


# -- checkpoints and resume ------------------------------------------------------------


def test_checkpoint_records_and_loop_state_round_trip(tmp_path: Path) -> None:
    import numpy as np

    with RunLogger(tmp_path, code_diff=False) as logger:
        for i in range(7):
            logger.log_metrics(i, {"progress/batch": i})
            if i in (2, 5):
                logger.log_checkpoint(
                    f"{i + 1:06d}",
                    batch=i + 1,
                    state_path=f"tinker://x/{i + 1}",
                    sampler_path="s",
                    epoch=0,
                    lr=np.float64(1e-4),
                    data_order=[3, 1, 2],
                    extra={"k": "v"},
                )
        logger.log_checkpoint("final", batch=7, final=True)
    records = rows(tmp_path / "checkpoints.jsonl")
    # where metrics.jsonl stood: its size and the CRC-32 of its last line (a resume reads only what follows)
    last = b'{"step":2,"progress/batch":2}'
    assert records[0].pop("metrics_at") == {"bytes": 3 * (len(last) + 1), "last_line_crc32": zlib.crc32(last)}
    assert records[2].pop("metrics_at")["bytes"] == 7 * (len(last) + 1)
    assert records[0] == {
        "name": "000003",
        "batch": 3,
        "epoch": 0,
        "state_path": "tinker://x/3",
        "sampler_path": "s",
        "lr": 1e-4,
        "data_order": [3, 1, 2],
        "extra": {"k": "v"},
        "last_logged_step": 2,  # with an epoch, where a resume from it starts
    }
    assert records[2] == {"name": "final", "batch": 7, "final": True}
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        state = logger.resume_state
    # tinker-cookbook's rule: the last record with state_path ("final" has none here)
    assert state.name == "000006" and state.batch == 6 and state.loop_state["last_logged_step"] == 5
    with RunLogger(tmp_path, resume=True, resume_require=None, code_diff=False) as logger:
        state = logger.resume_state
    assert state.name == "final" and state.batch == 7 and state.final is True and state.loop_state == {}
    with pytest.raises(TypeError, match="'bad'"):
        RunLogger(tmp_path / "x", code_diff=False).log_checkpoint("c", batch=1, bad=object())
    with pytest.raises(TypeError, match="batch must be an int"):
        RunLogger(tmp_path / "y", code_diff=False).log_checkpoint("c", batch="3")


def test_checkpoint_loop_state_with_nan_paths_arrays_and_odd_names(tmp_path: Path) -> None:
    import numpy as np

    with RunLogger(tmp_path, code_diff=False) as logger:
        logger.log_metrics(0, {"a": 1.0})
        logger.log_checkpoint(
            "a\udc80",
            batch=1,
            best=float("nan"),
            worst=float("-inf"),
            r=np.array([1.0, np.nan]),
            state_path=pathlib.Path("/ck/000001"),
            where=pathlib.Path("x"),
        )
    assert (
        logger.warnings == [] and "a\ufffd" in (tmp_path / "index.html").read_text()
    )  # shown (lone surrogate as U+FFFD), not a failure
    line = (tmp_path / "checkpoints.jsonl").read_bytes()
    row = b'{"step":0,"a":1.0}'
    assert line == (
        b'{"name":"a\xef\xbf\xbd","batch":1,"state_path":"/ck/000001","best":NaN,"worst":-Infinity,'
        b'"r":[1.0,NaN],"where":"x","metrics_at":{"bytes":%d,"last_line_crc32":%d}}\n'
        % (len(row) + 1, zlib.crc32(row))
    )
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        state = logger.resume_state
    assert state.name == "a\ufffd" and state.state_path == "/ck/000001"
    assert str(state.loop_state["best"]) == "nan" and state.loop_state["r"][0] == 1.0
    logger2 = RunLogger(tmp_path / "closed", code_diff=False)
    logger2.close()
    with pytest.raises(RuntimeError, match="closed"):
        logger2.log_checkpoint("x", batch=1)


def test_a_second_logger_never_rewrites_files_a_live_writer_appends_to(tmp_path: Path) -> None:
    """A relaunched job while the old one still runs: the old writer's rows are never lost."""
    script = f"""
        import sys, time
        from rllog import RunLogger
        with RunLogger({str(tmp_path)!r}, code_diff=False) as logger:
            print("ready", flush=True)
            for i in range(20000):
                logger.log_metrics(i, {{"pad": "y" * (i % 500)}})
                if i == 2000:
                    print("half", flush=True)
                    sys.stdin.readline()
    """
    path = tmp_path / "writer.py"
    path.write_text(textwrap.dedent(script))
    proc = subprocess.Popen(
        [sys.executable, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout.readline().strip() == "ready" and proc.stdout.readline().strip() == "half"
    with open(tmp_path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step":')  # a torn tail as if a writer were caught mid-row
    with pytest.raises(RuntimeError, match=r"being written by process \d+ .* a second run there would mix"):
        RunLogger(tmp_path, code_diff=False)
    with pytest.raises(RuntimeError, match=r"being written by process \d+ .* a resume there would mix"):
        RunLogger(tmp_path, resume=True, code_diff=False)
    with RunLogger(tmp_path, code_diff=False, shared=True) as second:  # on purpose: joins, repairs nothing
        second.log_metrics(99999, {"from": "second"})
    proc.stdin.write("go\n")
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    data = (tmp_path / "metrics.jsonl").read_bytes()
    assert not (tmp_path / "metrics.jsonl.torn").exists()  # the live file was not repaired under the writer
    assert data.count(b'"pad"') == 20000  # every row of the first writer is in the file
    assert data.count(b'{"step":99999,"from":"second"}\n') == 1


def test_resume_moves_rerun_steps_aside_and_keeps_them(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False) as logger:
        for i in range(10):
            logger.log_metrics(i, {"r": i / 10})
            if i == 5:
                logger.log_checkpoint("000006", batch=6, state_path="p6", data_seed=42)
    before = (tmp_path / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        assert logger.resume_state.batch == 6 and logger.resume_state["data_seed"] == 42
        assert logger.resume_state.loop_state == {"data_seed": 42}
        for i in range(6, 12):
            logger.log_metrics(i, {"r": 1.0})
    steps = [r["step"] for r in rows(tmp_path / "metrics.jsonl")]
    assert steps == list(range(12))
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes().splitlines(keepends=True) == before[6:]


def test_resume_compares_progress_batch_when_step_counts_something_else(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False) as logger:
        for i in range(8):
            logger.log_metrics(i * 128, {"progress/batch": i, "samples": i * 128})  # step = samples seen
            if i == 5:
                logger.log_checkpoint("000006", batch=6)
    with RunLogger(tmp_path, resume=True, code_diff=False):
        pass
    assert [r["progress/batch"] for r in rows(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3, 4, 5]
    assert [r["progress/batch"] for r in rows(tmp_path / "metrics.superseded.jsonl")] == [6, 7]


def test_resume_without_checkpoint_starts_over_keeping_old_rows(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False) as logger:
        for i in range(3):
            logger.log_metrics(i, {"r": i})
    old = (tmp_path / "metrics.jsonl").read_bytes()
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        assert logger.resume_state is None
        logger.log_metrics(0, {"r": 9})
    assert (tmp_path / "metrics.jsonl").read_bytes() == b'{"step":0,"r":9}\n'
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes() == old


def test_resume_finds_last_record_with_the_key(tmp_path: Path) -> None:
    (tmp_path / "checkpoints.jsonl").write_text(
        '{"name": "000010", "batch": 10}\n{"name": "sampler-only"}\n{"name": "weird", "batch": "x"}\n'
    )
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        assert logger.resume_state.name == "000010"
    (tmp_path / "checkpoints.jsonl").write_text('{"name": "e", "epoch": 3, "batch": 1}\n')
    with RunLogger(tmp_path, resume=True, resume_key="epoch", code_diff=False) as logger:
        assert logger.resume_state.batch == 3


@pytest.mark.parametrize(
    "content, kept, torn",
    [
        (b'{"step":0,"a":1}\n{"step":1,"a":', b'{"step":0,"a":1}\n', b'{"step":1,"a":\n'),
        (b'{"step":0,"a":1}\n{"step":1,"a":2}', b'{"step":0,"a":1}\n{"step":1,"a":2}\n', None),
        (b'{"st', b"", b'{"st\n'),
        (b'{"step":0}\n\xff\xfe', b'{"step":0}\n', b"\xff\xfe\n"),
    ],
)
def test_torn_last_line_is_moved_aside_and_new_rows_start_fresh(
    tmp_path: Path, content: bytes, kept: bytes, torn: bytes | None
) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(content)
    (tmp_path / "checkpoints.jsonl").write_bytes(b'{"name": "a", "batch": 0}\n{"name": "b", "ba')
    with pytest.warns(RuntimeWarning, match="torn last line|no newline"):
        with RunLogger(tmp_path, code_diff=False) as logger:
            logger.log_metrics(7, {"a": 7})
            logger.log_checkpoint("c", batch=8)
    assert (tmp_path / "metrics.jsonl").read_bytes() == kept + b'{"step":7,"a":7}\n'
    at = b'"metrics_at":{"bytes":%d,"last_line_crc32":%d}' % (len(kept) + 17, zlib.crc32(b'{"step":7,"a":7}'))
    assert (
        tmp_path / "checkpoints.jsonl"
    ).read_bytes() == b'{"name": "a", "batch": 0}\n{"name":"c","batch":8,' + at + b"}\n"
    assert (tmp_path / "checkpoints.jsonl.torn").read_bytes() == b'{"name": "b", "ba\n'
    if torn is None:
        assert not (tmp_path / "metrics.jsonl.torn").exists()
    else:
        assert (tmp_path / "metrics.jsonl.torn").read_bytes() == torn


# -- ranks, pickling, errors ---------------------------------------------------------------


def test_only_rank_zero_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    with RunLogger(tmp_path / "r1", config={"a": 1}) as logger:
        assert not logger.is_writer
        logger.log_metrics(0, {"a": 1})
        logger.log_checkpoint("c", batch=1)
    assert not (tmp_path / "r1").exists()
    with RunLogger(tmp_path / "all", all_ranks=True, code_diff=False) as logger:
        logger.log_metrics(0, {"a": 1})
    # all_ranks: rank 1 writes its own rank-tagged files (docs/FORMATS.md "Per-rank files")
    assert rows(tmp_path / "all" / "metrics.rank1.jsonl") == [{"step": 0, "a": 1}]
    assert not (tmp_path / "all" / "metrics.jsonl").exists()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert RunLogger(tmp_path / "r0", code_diff=False).is_writer
    monkeypatch.delenv("RANK")
    for var in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.setenv(var, "2")
        assert not RunLogger(tmp_path / var, code_diff=False).is_writer, var
        monkeypatch.delenv(var)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda lg: lg.log_metrics(-1, {"a": 1}), ValueError),
        (lambda lg: lg.log_metrics(0, {1: 1.0}), TypeError),
        (lambda lg: lg.log_metrics(0, {"step": 1}), ValueError),
        (lambda lg: lg.log_metrics(0, {"a": [1, 2]}), TypeError),
        (lambda lg: lg.log_checkpoint("c", batch=-1), ValueError),
        (lambda lg: lg.log_checkpoint(None, batch=1), TypeError),
        (lambda lg: lg.iteration(-1), ValueError),
        (lambda lg: lg.iteration("3"), TypeError),
        (lambda lg: lg.evaluation(None, 1), TypeError),
        (lambda lg: lg.evaluation("math", -1), ValueError),
        (lambda lg: lg.log_rollouts(-1, []), ValueError),
    ],
)
def test_a_non_writing_rank_raises_what_rank_zero_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call, error
) -> None:
    """A bug in the loop must not show only on rank 0 (or only on a 1-GPU debug run)."""
    writer = RunLogger(tmp_path / "r0", code_diff=False, index=False)
    monkeypatch.setenv("RANK", "1")
    null = RunLogger(tmp_path / "r1", code_diff=False)
    assert not null.is_writer
    with pytest.raises(error) as at_writer:
        call(writer)
    with pytest.raises(error) as at_null:
        call(null)
    assert str(at_null.value) == str(at_writer.value)
    writer.close()
    null.close()
    with pytest.raises(RuntimeError, match="closed RunLogger"):
        null.log_metrics(1, {"a": 1.0})
    assert not (tmp_path / "r1").exists()


def test_writing_an_iteration_twice_warns_once(tmp_path: Path) -> None:
    groups = [[{"steps": [{"reward": 1.0, "ob_len": 1, "ac_len": 1}]}]]
    with RunLogger(tmp_path, code_diff=False) as logger:
        logger.log_rollouts(0, groups)
        logger.log_rollouts(0, groups, eval_name="test")  # another split: fine
        with pytest.warns(
            RuntimeWarning, match="iteration 0's rollout summaries file \\(train\\) was already written"
        ):
            logger.log_rollouts(0, groups)
        with logger.iteration(1):
            pass
        with pytest.warns(RuntimeWarning, match="iteration 1's report \\(train\\) was already written"):
            with logger.iteration(1):
                pass
    assert len(logger.warnings) == 2


def test_logger_pickles_as_configuration(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False, config={"a": 1}) as logger:
        logger.log_metrics(0, {"a": 1})
        clone = pickle.loads(pickle.dumps(logger))
        assert clone.log_path == logger.log_path and clone.is_writer
        clone.log_metrics(1, {"a": 2})
        clone.close()
        logger.log_metrics(2, {"a": 3})
    assert [r["step"] for r in rows(tmp_path / "metrics.jsonl")] == [0, 1, 2]


def test_exception_in_loop_closes_files_and_propagates(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        with RunLogger(tmp_path, code_diff=False) as logger:
            logger.log_metrics(0, {"a": 1})
            logger.log_metrics(1, {"a": 1 / 0})
    assert logger._closed and rows(tmp_path / "metrics.jsonl") == [{"step": 0, "a": 1}]


@pytest.mark.parametrize("n_rows", [40, 100])
def test_full_disk_never_kills_the_loop_and_says_what_was_not_written(tmp_path: Path, n_rows: int) -> None:
    """A real write failure: the process's file-size limit (EFBIG), as a full disk gives.

    With 40 rows the unwritten rest fits in a rescue file; with 100 it does not (the limit
    holds for every file), and the rows are printed to stderr instead.
    """
    out = run_script(
        f"""
        import resource, signal, warnings, json
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
        from rllog import RunLogger
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            with RunLogger({str(tmp_path / "run")!r}, code_diff=False) as logger:
                for i in range({n_rows}):
                    logger.log_metrics(i, {{"reward": i / 100, "pad": "x" * 30}})
                logger.log_checkpoint("final", batch={n_rows})  # must not raise, must not be recorded
        print(json.dumps([str(w.message) for w in caught]))
    """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    msgs = json.loads(out.stdout.strip().splitlines()[-1])
    failures = [m for m in msgs if "could not write to" in m]
    assert len(failures) == 1 and "Training goes on" in failures[0]  # warned once, not once per row
    data = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    complete, _, torn = data.rpartition(b"\n")  # the row cut by the limit is a torn last line
    written = [json.loads(line) for line in complete.splitlines()]
    lost = n_rows - len(written)
    if torn:
        assert f"cut after {len(torn)} bytes" in " ".join(msgs)
    assert lost > 0
    if n_rows == 40:
        saved = [m for m in msgs if "were saved to" in m]
        assert len(saved) == 1 and f"{lost} metric row(s) could not be written" in saved[0]
        rescue = Path(saved[0].rsplit("saved to ", 1)[1].strip())
        recovered = rows(rescue)
        rescue.unlink()
    else:
        assert any(
            f"{lost} metric row(s) could not be written" in m and "printed to stderr" in m for m in msgs
        )
        recovered = [json.loads(line) for line in out.stderr.splitlines() if line.startswith('{"step"')]
    assert [r["step"] for r in written + recovered] == list(range(n_rows))  # nothing lost, nothing twice
    # the checkpoint record would point past rows that were never written: held back, reported
    assert not (tmp_path / "run" / "checkpoints.jsonl").exists()
    assert any("held back" in m for m in msgs)
    assert any(
        f"not written to {tmp_path / 'run'}/checkpoints.jsonl" in m and '"name":"final"' in m for m in msgs
    )


def test_open_storage_rejects_escaping_names(tmp_path: Path) -> None:
    storage = rllog.open_storage(tmp_path)
    for bad in ["../x", "/etc/passwd", "a/../../b", "a\\b", "a\x00b", "", "a//b"]:
        with pytest.raises(ValueError):
            storage.write(bad, b"x")


def test_every_writing_call_after_close_raises_the_same_error(tmp_path):
    logger = RunLogger(tmp_path, code_diff=False, index=False)
    logger.close()
    calls = {
        "log_metrics": lambda: logger.log_metrics(1, {"x": 1.0}),
        "log_config": lambda: logger.log_config({"a": 1}),
        "log_checkpoint": lambda: logger.log_checkpoint("000001", batch=1),
        "log_rollouts": lambda: logger.log_rollouts(1, [[{"steps": [{"reward": 1.0}]}]]),
        "iteration": lambda: logger.iteration(1),
        "evaluation": lambda: logger.evaluation("test", 1),
    }
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match="on a closed RunLogger"):
            call()
            pytest.fail(f"{name} after close did not raise")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "metrics.jsonl",
        "run_status.json",  # the status marker (written at start and close)
    ]
    assert (tmp_path / "metrics.jsonl").read_bytes() == b""


def test_log_rollouts_with_swapped_arguments_says_so_and_spends_no_rewrite_warning(tmp_path):
    groups = [[{"steps": [{"reward": 1.0}]}]]
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        with pytest.raises(TypeError, match="iteration comes first"):
            logger.log_rollouts(groups, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            logger.log_rollouts(3, groups)  # the first real write of iteration 3: no rewrite warning
        with pytest.warns(RuntimeWarning, match="already written"):
            logger.log_rollouts(3, groups)


def test_a_split_that_contradicts_eval_name_is_refused_when_writing(tmp_path):
    groups = [[{"steps": [{"reward": 1.0}]}]]
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        for split, eval_name in (("train", "test"), ("eval/other", "test"), ("eval/test", None)):
            with pytest.raises(ValueError, match="split"):
                logger.log_rollouts(1, groups, split=split, eval_name=eval_name)
        logger.log_rollouts(1, groups, split="eval/test", eval_name="test")
    assert [p.name for p in tmp_path.glob("*rollout_summaries*")] == [
        "eval_test_iteration_000001_rollout_summaries.jsonl"
    ]


def test_a_logger_on_a_storage_object_pickles_that_storage(tmp_path):
    import pickle

    from rllog.testing import FaultyStorage

    storage = FaultyStorage(LocalStorage(tmp_path), fail_on={"append"}, times=0)
    with RunLogger(storage, code_diff=False, index=False) as logger:
        worker = pickle.loads(pickle.dumps(logger))
        assert type(worker.storage) is FaultyStorage
        worker.log_rollouts(2, [[{"steps": [{"reward": 1.0}]}]])
        worker.close()
    assert (tmp_path / "train_iteration_000002_rollout_summaries.jsonl").exists()


def test_a_step_logged_twice_with_a_clashing_value_warns_once(tmp_path):
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            logger.log_metrics(0, {"reward": 1.0, "kl": 0.1})
            logger.log_metrics(0, {"test/reward": 0.5})  # new keys for the step: fine
        with pytest.warns(RuntimeWarning, match="step 0 was logged twice"):
            logger.log_metrics(0, {"kl": float("nan"), "x": 1})  # NaN over 0.1 clashes
        logger.log_metrics(0, {"kl": 0.2})  # warned once per logger
    assert sum("logged twice" in w for w in logger.warnings) == 1
    with RunLogger(tmp_path / "b", code_diff=False, index=False) as logger:
        logger.log_metrics(1, {"reward": 1.0})
        logger.log_metrics(1, {"reward": 2.0})
    assert any("step 1 was logged twice with different values for 'reward'" in w for w in logger.warnings)

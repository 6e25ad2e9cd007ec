"""report_to="tensorboard": event files read back by TensorBoard's own EventAccumulator."""

from __future__ import annotations

import json
import math
import os

import fsspec
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rllog import RunLogger
from rllog.sinks import TensorBoard


def _rows(n, start=0):
    return [
        {"loss": (math.nan if i == 3 else 1.0 / (i + 1)), "reward": 0.1 * i, "ok": i % 2 == 0}
        for i in range(start, n)
    ]


def _scalars(folder):
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return acc, {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _same(got, rows):
    for tag in ("loss", "reward", "ok"):
        want = [(r["step"], float(np.float32(r[tag]))) for r in rows]
        assert [s for s, _ in got[tag]] == [s for s, _ in want], tag
        for (_, a), (_, b) in zip(got[tag], want, strict=True):
            assert (math.isnan(a) and math.isnan(b)) or a == b, tag


def test_every_scalar_reads_back_and_a_resume_has_no_step_twice(tmp_path):
    run = tmp_path / "run"
    with RunLogger(run, report_to="tensorboard", config={"lr": 0.01}, code_diff=False, index=False) as lg:
        for i, row in enumerate(_rows(10)):
            lg.log_metrics(i, row)
            if i == 5:
                lg.log_checkpoint("000006", batch=6)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    acc, got = _scalars(run / "tensorboard")
    _same(got, rows)
    assert {"config", "checkpoints", "_hparams_/session_start_info"} <= set(acc.Tags()["tensors"])
    (text,) = acc.Tensors("config")
    assert b'"lr": 0.01' in text.tensor_proto.string_val[0]
    # resume from the checkpoint at batch 6: steps 6-9 are logged again, with new values
    with RunLogger(run, report_to="tensorboard", resume=True, code_diff=False, index=False) as lg:
        assert lg.resume_state.batch == 6
        for i in range(6, 12):
            lg.log_metrics(i, {"loss": 5.0 + i, "reward": 1.0 + i, "ok": True})
    assert len(list((run / "tensorboard").iterdir())) == 2
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    _, got = _scalars(run / "tensorboard")
    steps = [s for s, _ in got["loss"]]
    assert steps == list(range(12)) and dict(got["loss"])[7] == 12.0  # no step twice, the re-run wins
    _same(got, rows)


def _texts(acc, tag):
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]


def test_config_checkpoints_reports_rollouts_and_findings_read_back_as_text_and_hparams(tmp_path):
    from tensorboard.plugins.hparams import plugin_data_pb2

    from rllog import logtree

    run = tmp_path / "run"
    group = [
        {"steps": [{"ob_len": 7, "ac_len": 3, "reward": 1.0, "episode_done": True}], "final_reward": 0.0}
    ] * 2
    cfg = {"lr": 0.01, "optim": {"beta": 0.9, "name": "adam|w"}, "use_kl": True}
    with RunLogger(run, report_to="tensorboard", doctor=True, config=cfg, code_diff=False, index=False) as lg:
        for i in range(3):
            with lg.iteration(i):
                logtree.text(f"iteration {i}")
            lg.log_rollouts(i, [group], tags=["math"])
            lg.log_metrics(i, {"loss": math.nan if i == 2 else 1.0})
            lg.log_checkpoint(f"{i + 1:06d}", batch=i + 1, state_path=f"/ckpt/{i + 1}")
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    # config: the JSON of config.json as text, and its flattened scalars as hparams
    ((step, text),) = _texts(acc, "config")
    assert step == 0 and json.loads(text.strip("`\n")) == json.loads((run / "config.json").read_text())
    meta = acc.SummaryMetadata("_hparams_/session_start_info")
    data = plugin_data_pb2.HParamsPluginData.FromString(meta.plugin_data.content)
    hp = {
        k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
        for k, v in data.session_start_info.hparams.items()
    }
    assert hp == {"lr": 0.01, "optim.beta": 0.9, "optim.name": "adam|w", "use_kl": True}
    # every checkpoint record at its batch
    ckpts = _texts(acc, "checkpoints")
    assert [(s, json.loads(t.strip("`"))) for s, t in ckpts] == [
        (r["batch"], _shown(r)) for r in map(json.loads, (run / "checkpoints.jsonl").read_text().splitlines())
    ]
    # a link to every iteration's report, at the iteration
    assert _texts(acc, "reports/train") == [
        (i, f"[train_iteration_{i:06d}.html]({run}/train_iteration_{i:06d}.html)") for i in range(3)
    ]
    # the trajectories as a markdown table
    tables = _texts(acc, "rollouts/train")
    assert [s for s, _ in tables] == [0, 1, 2]
    lines = tables[1][1].splitlines()
    assert lines[0] == "train_iteration_000001_rollout_summaries.jsonl: 2 trajectories"
    assert lines[2].startswith("| iteration | group_idx | traj_idx | tags |")
    assert lines[4:] == [
        "| 1 | 0 | 0 | math |  | 1.0 | 0.0 | 1 | 7 | 3 |  | {} |",
        "| 1 | 0 | 1 | math |  | 1.0 | 0.0 | 1 | 7 | 3 |  | {} |",
    ]
    # the doctor's finding, at the step it fired
    (finding,) = map(json.loads, (run / "doctor.jsonl").read_text().splitlines())
    assert _texts(acc, "doctor/nonfinite") == [(2, f"**error**: {finding['message']}. {finding['advice']}")]


def test_event_files_go_to_the_bucket(tmp_path, gcs_server):
    url = f"gs://{gcs_server.new_bucket()}/runs/tb"
    opts = gcs_server.storage_options()
    with RunLogger(url, report_to="tensorboard", code_diff=False, index=False, **opts) as lg:
        for i, row in enumerate(_rows(8)):
            lg.log_metrics(i, row)
    fs = fsspec.filesystem("gs", **opts)
    (name,) = [p for p in fs.ls(f"{url[5:]}/tensorboard") if "tfevents" in p]
    local = tmp_path / "tb"
    local.mkdir()
    fs.get(name, str(local / name.rsplit("/", 1)[1]))
    rows = [json.loads(x) for x in fs.cat(f"{url[5:]}/metrics.jsonl").decode().splitlines()]
    _, got = _scalars(local)
    _same(got, rows)


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("logging_dir", [".", "", "./tb", "tb/x/.."])
def test_logging_dir_is_normalised_inside_the_run(tmp_path, logging_dir):
    # logging_dir="." (event files beside metrics.jsonl, for `tensorboard --logdir runs/`) made
    # the storage refuse the name on the sink thread: TensorBoard was disabled after 3 tries
    run = tmp_path / "run"
    with RunLogger(run, report_to=TensorBoard(logging_dir=logging_dir), code_diff=False, index=False) as lg:
        for i in range(3):
            lg.log_metrics(i, {"loss": 1.0 / (i + 1)})
    assert lg.warnings == []
    folder = run / os.path.normpath(logging_dir or ".")
    _, got = _scalars(folder)
    assert [s for s, _ in got["loss"]] == [0, 1, 2]


@pytest.mark.parametrize("logging_dir", ["..", "../elsewhere", "tb/../../x"])
def test_logging_dir_outside_the_run_fails_at_construction(logging_dir):
    with pytest.raises(ValueError, match="logging_dir"):
        TensorBoard(logging_dir=logging_dir)


def _shown(record):
    """A checkpoint record as the trackers get it: without rllog's own bookkeeping (metrics_at)."""
    return {k: v for k, v in record.items() if k != "metrics_at"}

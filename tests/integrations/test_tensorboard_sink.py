"""report_to="tensorboard": event files read back by TensorBoard's own EventAccumulator."""

from __future__ import annotations

import json
import math

import fsspec
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rllog import RunLogger


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

"""Importers on synthetic inputs: the TensorBoard overlap rule, tag mapping, skipped summaries, URIs, overwrite."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from rllog import read_run
from rllog.errors import RunFormatError
from rllog.importers import import_tensorboard, import_trl
from rllog.storage import open_storage


def write_events(logdir, start_time: int, scalars: list[tuple[int, str, float]], extra=()) -> None:
    """Write ``events.out.tfevents.<start_time>.host`` with tensorboard's own record writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(logdir / f"events.out.tfevents.{start_time}.host", "wb") as f:
        writer = RecordWriter(f)
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        for step, tag, value in scalars:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.write(
                event_pb2.Event(wall_time=time.time(), step=step, summary=summary).SerializeToString()
            )
        for event in extra:
            writer.write(event.SerializeToString())


def test_tensorboard_overlap_later_file_wins_from_its_first_step(tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.util import tensor_util

    logs = tmp_path / "logs"
    logs.mkdir()
    # attempt 1 logs steps 0..5 then dies; attempt 2 resumes at step 3 and reaches 7
    write_events(logs, 100, [(s, "train/loss", 1.0 + s) for s in range(6)] + [(4, "eval/loss", 9.0)])
    hist = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="weights", histo=summary_pb2.HistogramProto(num=3))]
    )
    tensor = summary_pb2.Summary.Value(tag="train/kl", tensor=tensor_util.make_tensor_proto(0.25))
    tensor.metadata.plugin_data.plugin_name = "scalars"
    write_events(
        logs,
        200,
        [(s, "train/loss", 2.0 + s) for s in range(3, 8)]
        + [(6, "eval/loss", 7.5), (7, "custom", 1.0), (7, "train/loss", 9.5)],
        extra=[
            event_pb2.Event(step=7, summary=hist),
            event_pb2.Event(step=7, summary=summary_pb2.Summary(value=[tensor])),
        ],
    )
    report = import_tensorboard(logs, tmp_path / "run")
    run = read_run(tmp_path / "run")
    df = run.metrics
    assert df["step"].tolist() == list(range(8))
    assert df["loss"].tolist() == [1.0, 2.0, 3.0, 5.0, 6.0, 7.0, 8.0, 9.5]  # (tag, step) twice: later value
    assert (
        df["eval_loss"].dropna().tolist() == [7.5] and df.loc[7, "custom"] == 1.0 and df.loc[7, "kl"] == 0.25
    )
    sup = run.superseded  # attempt 1's steps >= 3, its eval row at 4 included
    assert sup["step"].tolist() == [3, 4, 4, 5] and sup["eval_loss"].dropna().tolist() == [9.0]
    assert report.superseded == 4 and any("weights (1)" in n for n in report.notes)
    assert any("written twice (1 different)" in n for n in report.notes)


def test_tensorboard_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no events.out.tfevents"):
        import_tensorboard(tmp_path, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no TensorBoard log"):
        import_tensorboard(tmp_path / "missing", tmp_path / "out")


def trainer_state(log_history: list[dict], **fields) -> bytes:
    return json.dumps(
        {"global_step": log_history[-1]["step"], "max_steps": 10, **fields, "log_history": log_history}
    ).encode()


def test_trl_rows_from_and_to_uris():
    base = f"memory://rllog-import-{uuid.uuid4().hex}"
    history = [
        {"loss": 0.5, "reward": 1.0, "epoch": 0.5, "step": 1, "completions": [1, 2]},
        {"eval_loss": 0.7, "eval_reward": 0.9, "epoch": 0.6, "step": 1},  # epoch differs: kept as eval_epoch
        {
            "train_runtime": 12.0,
            "train_loss": 0.5,
            "epoch": 0.5,
            "step": 1,
        },  # summary row; epoch equal: dropped
    ]
    source = open_storage(base)
    source.write("ckpt/trainer_state.json", trainer_state(history, hub_token="secret123"))
    source.close()  # object-store writes are uploaded by flush/close
    report = import_trl(f"{base}/ckpt/trainer_state.json", f"{base}/run")
    assert report.rows == 3 and report.config and any("not a scalar" in n for n in report.notes)
    run = read_run(f"{base}/run")
    assert run.rows == [
        {"step": 1, "loss": 0.5, "reward": 1.0, "epoch": 0.5, "completions": "[1,2]", "eval_loss": 0.7,
         "eval_reward": 0.9, "eval_epoch": 0.6, "train_runtime": 12.0, "train_loss": 0.5}
    ]  # fmt: skip
    assert (
        run.config["max_steps"] == 10 and run.config["hub_token"] != "secret123"
    )  # the writer redacts secrets


def test_trl_refuses_to_overwrite_unless_asked(tmp_path):
    src = tmp_path / "trainer_state.json"
    src.write_bytes(trainer_state([{"loss": 1.0, "step": 1}]))
    import_trl(src, tmp_path / "run")
    with pytest.raises(FileExistsError, match="already exists"):
        import_trl(src, tmp_path / "run")
    src.write_bytes(
        b'{"global_step": 2, "log_history": [{"loss": 2.0, "step": 1}, {"loss": NaN, "step": 2}]}'
    )
    import_trl(src, tmp_path / "run", overwrite=True)
    assert (tmp_path / "run/metrics.jsonl").read_bytes() == b'{"step":1,"loss":2.0}\n{"step":2,"loss":NaN}\n'


def test_trl_bad_inputs(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(RunFormatError, match="not JSON"):
        import_trl(tmp_path / "a.json", tmp_path / "out")
    (tmp_path / "b.json").write_text('{"global_step": 3}')
    with pytest.raises(RunFormatError, match="log_history"):
        import_trl(tmp_path / "b.json", tmp_path / "out")

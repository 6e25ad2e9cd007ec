"""The TensorBoard sink: event files written with the ``tensorboard`` package's own
protobuf classes (``Event``, ``Summary``, ``SessionLog``, serialized by protobuf's C
implementation) in TFRecord framing (length, masked CRC32C of the length, data, masked
CRC32C of the data; the framing of ``tensorboard.summary.writer.record_writer.RecordWriter``),
appended through the run's Storage. No torch, no TensorFlow; on ``gs://``/``s3://`` the
bytes go up with the storage's O(new bytes) appends.

The CRC32C is ``google_crc32c`` (C; already installed with gcsfs): tensorboard's own
``masked_crc32c`` without TensorFlow is pure Python, ~260 us per 100-scalar event,
GIL time the sink thread would take from the training loop (benchmarks/bench_sinks.py).

A file is ``<logging_dir>/events.out.tfevents.<unix time>.<host>.<pid>.rllog``; each
writer (each resume) starts a new one. Scalars are ``simple_value`` (float32, as
``SummaryWriter.add_scalar`` writes them; NaN/±Inf kept); strings are skipped. On a
resume the new file starts with ``SessionLog(START)`` at the resume step, which
TensorBoard's reader (``EventAccumulator``, ``purge_orphaned_data=True``, the default)
takes as "the events at or past this step were orphaned by a restart": the series reads
back with no step twice and no zig-zag.
"""

from __future__ import annotations

import io
import os
import posixpath
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from rllog._format.codec import encode_json
from rllog._format.layout import TENSORBOARD_DIR
from rllog.sinks._common import ROLLOUT_COLUMNS, numeric, require, rollout_rows
from rllog.storage import Storage, open_storage

__all__ = ["TensorBoard"]


@dataclass
class TensorBoard:
    """Write TensorBoard event files.

    Args:
        logging_dir: a folder inside the run (default ``"tensorboard"``; ``"."`` is the run
            folder itself), or an absolute path or URL of its own (then opened with
            :func:`rllog.open_storage`).
        flush_every: rows buffered before one storage append (the buffer is also written
            when the queue is idle and at close).

    Raises:
        ValueError: a relative ``logging_dir`` that leads out of the run (``"../tb"``).
    """

    logging_dir: str = TENSORBOARD_DIR
    flush_every: int = 20
    name: str = "tensorboard"
    _storage: Storage | None = field(default=None, init=False, repr=False)
    _own_storage: bool = field(default=False, init=False, repr=False)
    _file: str = field(default="", init=False, repr=False)
    _buf: io.BytesIO = field(default_factory=io.BytesIO, init=False, repr=False)
    _pending: int = field(default=0, init=False, repr=False)
    _pb: Any = field(default=None, init=False, repr=False)
    _crc: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        logdir = self.logging_dir
        if "://" not in logdir and not os.path.isabs(logdir):
            rel = posixpath.normpath(logdir or ".")  # "./tb" -> "tb", "" -> "."
            if rel == ".." or rel.startswith("../"):
                raise ValueError(
                    f"TensorBoard(logging_dir={logdir!r}) leads out of the run folder; give a folder "
                    "inside it (e.g. 'tensorboard', or '.' for the run folder) or an absolute path or URL"
                )
            self.logging_dir = rel

    def check_installed(self) -> None:
        require("tensorboard", "tensorboard")

    def open(self, run: Any) -> dict[str, Any]:
        import google_crc32c
        from tensorboard.compat.proto import event_pb2, summary_pb2

        self._pb = (event_pb2, summary_pb2)
        self._crc = google_crc32c.value
        logdir = self.logging_dir.rstrip("/")
        if "://" in logdir or os.path.isabs(logdir):
            self._storage, self._own_storage, prefix = open_storage(logdir), True, ""
        else:
            self._storage, prefix = run.storage, "" if logdir == "." else logdir + "/"
        self._file = (
            f"{prefix}events.out.tfevents.{time.time():.6f}.{socket.gethostname()}.{os.getpid()}.rllog"
        )
        self._event(file_version="brain.Event:2")
        if run.resume:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._event(step=run.resume_step or 0, session_log=start)
        self._write()
        return {"file": self._file}

    def _event(self, **fields: Any) -> None:
        event_pb2 = self._pb[0]
        self._record(event_pb2.Event(wall_time=time.time(), **fields).SerializeToString())

    def _record(self, data: bytes) -> None:
        """Append one TFRecord to the buffer."""
        header = struct.pack("<Q", len(data))
        crc = self._crc
        self._buf.write(header + _MASK.pack(_mask(crc(header))) + data + _MASK.pack(_mask(crc(data))))
        self._pending += 1

    def _text(self, step: int, tag: str, text: str) -> None:
        from tensorboard.plugins.text.summary import text_pb

        self._event(step=step, summary=text_pb(tag, text))

    def _write(self) -> None:
        data = self._buf.getvalue()
        if data:
            assert self._storage is not None
            self._storage.append(self._file, data)  # a failure keeps the bytes for the retry
            self._buf.seek(0)
            self._buf.truncate()
        self._pending = 0

    # Each method writes what earlier calls buffered before adding its own events, so a
    # call the dispatcher retries after a failed append adds its events once.

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        if self._pending >= self.flush_every:
            self._write()
        event = self._pb[0].Event(wall_time=time.time(), step=step)
        add = event.summary.value.add  # in place: half the cost of building Value objects first
        for k, v in row.items():
            if type(v) is float:
                add(tag=k, simple_value=v)
            elif (f := numeric(v)) is not None:
                add(tag=k, simple_value=f)
        if event.summary.value:
            self._record(event.SerializeToString())

    def log_config(self, config: dict[str, Any]) -> None:
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb

        self._write()
        text = encode_json(config, indent=2).decode()
        self._text(0, "config", f"```\n{text}\n```")
        flat = {k: v for k, v in _flatten(config).items() if isinstance(v, (bool, int, float, str))}
        if flat:
            self._event(step=0, summary=hparams_pb(flat))

    def log_checkpoint(self, record: dict[str, Any]) -> None:
        self._write()
        self._text(int(record.get("batch") or 0), "checkpoints", f"`{encode_json(record).decode()}`")

    def log_report(self, report: dict[str, Any]) -> None:
        self._write()
        self._text(
            int(report["iteration"]), f"reports/{report['split']}", f"[{report['html']}]({report['url']})"
        )

    def log_rollouts(self, rollouts: dict[str, Any]) -> None:
        """A markdown table of the iteration's trajectories (:data:`ROLLOUT_COLUMNS`, the
        first :data:`ROLLOUT_TEXT_ROWS`; then a line naming the file with the rest), as the
        text summary ``rollouts/<split>`` at step = the iteration."""
        self._write()
        rows = rollout_rows(rollouts["records"])
        lines = [
            f"{rollouts['file']}: {len(rows)} trajectories",
            "",
            "| " + " | ".join(ROLLOUT_COLUMNS) + " |",
            "|" + "---|" * len(ROLLOUT_COLUMNS),
        ]
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows[:ROLLOUT_TEXT_ROWS]]
        if len(rows) > ROLLOUT_TEXT_ROWS:
            lines.append(f"\n{len(rows) - ROLLOUT_TEXT_ROWS} more in {rollouts['file']}")
        self._text(int(rollouts["iteration"]), f"rollouts/{rollouts['split']}", "\n".join(lines))

    def log_finding(self, finding: dict[str, Any]) -> None:
        self._write()
        self._text(
            int(finding["fired_at"]),
            f"doctor/{finding['check']}",
            f"**{finding['severity']}**: {finding['message']}. {finding['advice']}",
        )

    def idle(self) -> None:
        """The queue is empty: write what is buffered."""
        if self._pending:
            self._write()

    def close(self) -> None:
        self._write()
        if self._own_storage and self._storage is not None:
            self._storage.close()


_MASK = struct.Struct("<I")

#: trajectories shown in a rollouts text summary (the file has them all)
ROLLOUT_TEXT_ROWS = 64


def _cell(value: Any) -> str:
    """A markdown table cell: ``|`` escaped, newlines as spaces, None empty."""
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _mask(crc: int) -> int:
    """TFRecord's masked CRC32C: ``((crc >> 15 | crc << 17) + 0xA282EAD8) mod 2**32``
    (tensorflow/core/lib/hash/crc32c.h ``Mask``; tensorboard's ``masked_crc32c``)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out

"""kill -9 campaign: random SIGKILLs across every kind of write, then a same-machine resume.

    PYTHONPATH=. python benchmarks/bench_crash.py [--local 200] [--gcs 50] [--s3 50] [--seed 0]

Each trial starts a writer process (:data:`CHILD`) whose loop logs metric rows, rollout
summaries, a logtree report and, every 5 steps, a checkpoint (plus, on buckets, a durable
flush every 5 steps), printing what it starts (``B <kind>``) and what returned
(``ACK row <step>``, ``ACK ckpt <batch>``: locally once ``log_checkpoint`` returned, on a
bucket once the next durable ``flush`` did). The campaign kills it with SIGKILL at a
random instant, then opens the run again with ``RunLogger(..., resume=True)`` on the same
machine (same spill folder), closes it, and checks with the reader's own parsing:

- unreadable: lines of metrics.jsonl / checkpoints.jsonl that do not parse;
- lost rows: acknowledged steps found neither in metrics.jsonl nor in
  metrics.superseded.jsonl;
- early records: checkpoint records whose batch has an acknowledged step before it
  missing from the rows (a record before its rows);
- lost records: acknowledged checkpoint records missing from checkpoints.jsonl;
- duplicates: a step standing twice in metrics.jsonl;
- resume_failed: trials whose ``RunLogger(..., resume=True)`` raised (must be 0);
- writer_died_alone: trials whose writer exited before the kill (must be 0: such a
  trial proves nothing); acked_rows: acknowledged rows checked, summed over the trials.

The kill's "kind" is the last ``B <kind>`` the child printed (metrics, checkpoint, report,
rollouts, flush/upload, open/journal adoption: the child starts by adopting the journal
of the previous trial's dead writer when there is one). Servers: the GCS emulator and
moto on 127.0.0.1 (tests/servers.py). Prints one line per backend with the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

CHILD = r"""
import json, os, sys
from rllog import RunLogger, logtree
url, options, start = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
bucket = "://" in url
def say(*parts):
    os.write(1, (" ".join(map(str, parts)) + "\n").encode())
say("B", "open")
extra = {"flush_interval": 0.2} if bucket else {}
logger = RunLogger(url, resume=True, code_diff=False, index=False, **extra, **options)
step = logger.resume_state.batch if logger.resume_state else 0
say("READY", step)
acked_ckpt = []
while True:
    say("B", "metrics")
    logger.log_metrics(step, {"progress/batch": step, "loss": 1.0 / (step + 1), "pad": "x" * 200})
    say("ACK", "row", step)
    if step % 3 == 0:
        say("B", "rollouts")
        logger.log_rollouts(step, [[{"steps": [{"reward": float(step), "ob_len": 3, "ac_len": 2}]}]])
    if step % 4 == 1:
        say("B", "report")
        with logger.iteration(step):
            logtree.text("step " + str(step) * 50)
    step += 1
    if step % 5 == 0:
        say("B", "checkpoint")
        logger.log_checkpoint(f"{step:06d}", batch=step)
        if bucket:
            acked_ckpt.append(step)
            say("B", "flush")
            logger.flush(durable=True)
            for b in acked_ckpt:
                say("ACK", "ckpt", b)
            acked_ckpt.clear()
        else:
            say("ACK", "ckpt", step)
"""


def _parse(data: bytes) -> tuple[list[dict], int]:
    rows, bad = [], 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            bad += 1
    return rows, bad


def _read(url: str, options: dict, name: str) -> bytes:
    from rllog.storage import open_storage

    reader = open_storage(url, "r", **options)
    try:
        return reader.read(name)
    except FileNotFoundError:
        return b""


def trial(url: str, options: dict, env: dict, rng: random.Random, acked: dict) -> dict:
    """One kill and resume on the run at ``url``; ``acked`` accumulates across trials of
    one run (rows and records acknowledged by every killed writer). Returns the counts."""
    errors = tempfile.TemporaryFile()  # the writer's stderr, shown when it died on its own
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, json.dumps(options), "0"],
        stdout=subprocess.PIPE,
        stderr=errors,
        env=env,
    )
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode().strip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    started = time.monotonic()
    # kill during start-up (journal adoption) in some trials, else during the loop
    delay = rng.uniform(0.0, 0.6) if rng.random() < 0.15 else None
    while delay is None and not any(line.startswith("READY") for line in lines):
        if proc.poll() is not None or time.monotonic() - started > 60:
            break
        time.sleep(0.005)
    time.sleep(delay if delay is not None else rng.uniform(0.05, 1.5))
    died_alone = proc.poll() is not None  # the writer failed on its own: the trial proves nothing
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(5)
    if died_alone:
        errors.seek(0)
        tail = errors.read().decode("utf-8", "replace").splitlines()[-15:]
        print(f"writer died alone (exit {proc.returncode}):\n" + "\n".join(tail), file=sys.stderr)
    errors.close()
    kind = next((line.split()[1] for line in reversed(lines) if line.startswith("B ")), "start")
    for line in lines:
        parts = line.split()
        if parts[:2] == ["ACK", "row"]:
            acked["rows"].add(int(parts[2]))
        elif parts[:2] == ["ACK", "ckpt"]:
            acked["ckpts"].add(int(parts[2]))
    # the same-machine resume
    from rllog import RunLogger

    try:
        with RunLogger(url, resume=True, code_diff=False, index=False, **options) as logger:
            resumed_at = logger.resume_state.batch if logger.resume_state else 0
    except OSError as exc:  # counted, not fatal: the next trials go on with this run
        print(f"resume failed: {exc}", file=sys.stderr)
        return {"kind": kind, "resume_failed": 1, "writer_died_alone": int(died_alone)}
    metrics, bad_m = _parse(_read(url, options, "metrics.jsonl"))
    superseded, _ = _parse(_read(url, options, "metrics.superseded.jsonl"))
    records, bad_c = _parse(_read(url, options, "checkpoints.jsonl"))
    steps = Counter(r["step"] for r in metrics)
    present = set(steps) | {r["step"] for r in superseded}
    batches = {r["batch"] for r in records}
    # a resumed writer re-runs steps from the checkpoint: acknowledged steps past it are superseded
    acked["rows"] = {s for s in acked["rows"] if s < resumed_at} | (acked["rows"] & present)
    return {
        "kind": kind,
        "writer_died_alone": int(died_alone),
        "acked_rows": len(acked["rows"]),
        "unreadable": bad_m + bad_c,
        "lost_rows": len(acked["rows"] - present),
        "early_records": sum(1 for b in batches if any(s < b and s not in present for s in acked["rows"])),
        "lost_records": len(acked["ckpts"] - batches),
        "duplicates": sum(n - 1 for n in steps.values() if n > 1),
    }


def campaign(backend: str, n: int, rng: random.Random, server=None, runs_of: int = 10) -> dict:
    """``n`` trials on ``backend``; every ``runs_of`` trials share one run (kill, resume,
    kill again...), so later trials also adopt dead writers' journals."""
    totals: Counter = Counter()
    kinds: Counter = Counter()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for i in range(n):
        if i % runs_of == 0:
            if server is None:
                url, options = tempfile.mkdtemp(prefix="rllog-crash-") + "/run", {}
            else:
                url = f"{server.scheme}://{server.new_bucket()}/run"
                options = server.storage_options()
            acked: dict = {"rows": set(), "ckpts": set()}
        result = trial(url, options, env, rng, acked)
        kinds[result.pop("kind")] += 1
        totals.update(result)
        totals["trials"] += 1
    return {"backend": backend, **totals, "kill landed in": dict(kinds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", type=int, default=200)
    parser.add_argument("--gcs", type=int, default=50)
    parser.add_argument("--s3", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from servers import GcsServer, S3Server, configure_gcs_env, free_port

    port = free_port()
    configure_gcs_env(port)
    os.environ.setdefault("RLLOG_SPILL_DIR", tempfile.mkdtemp(prefix="rllog-crash-spill-"))
    import warnings

    warnings.simplefilter("ignore")
    rng = random.Random(args.seed)
    plan = [("local", args.local, None)]
    if args.gcs:
        plan.append(("gcs", args.gcs, GcsServer(port)))
    if args.s3:
        plan.append(("s3", args.s3, S3Server()))
    for backend, n, server in plan:
        if n:
            started = time.monotonic()
            result = campaign(backend, n, rng, server)
            result["seconds"] = round(time.monotonic() - started, 1)
            print(json.dumps(result), flush=True)
    os._exit(0)  # moto's and the emulator's server threads would keep the process alive


if __name__ == "__main__":
    main()

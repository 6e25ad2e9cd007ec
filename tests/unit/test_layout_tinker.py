"""RunLogger(layout="tinker"): tinker-cookbook 0.6's per-iteration names, read back by rllog's
reader, relative links inside the nested pages, copies of a second writer, resume moving
nested reports aside, and unknown layouts refused. (tinker-cookbook's own readers on such a
run: tests/integrations/test_tinker_loop.py.)"""

from __future__ import annotations

import pickle

import pytest

from rllog import RunLogger, logtree, read_run
from rllog._format.layout import artifact_copy_name, artifact_name, parse_artifact_name, parse_iteration_file

ONE = [[{"steps": [{"ob_len": 3, "ac_len": 2, "reward": 1.0}]}]]


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("kind", "eval_name", "name"),
    [
        ("html", None, "iteration_000007/train.html"),
        ("logtree", None, "iteration_000007/train_logtree.json"),
        ("rollout_summaries", None, "iteration_000007/train_rollout_summaries.jsonl"),
        ("html", "gsm8k", "iteration_000007/eval_gsm8k.html"),
        ("rollout_summaries", "gsm8k", "iteration_000007/eval_gsm8k_rollout_summaries.jsonl"),
    ],
)
def test_tinker_names_round_trip(kind, eval_name, name):
    assert artifact_name(7, kind, eval_name, layout="tinker") == name
    assert parse_artifact_name(name) == ("train" if eval_name is None else "eval", eval_name, 7, kind)
    copy = artifact_copy_name(name, 2)
    assert copy == name.replace("iteration_000007/", "iteration_000007-2/")
    a = parse_iteration_file(copy)
    assert a is not None and (a.iteration, a.kind, a.eval_name) == (7, kind, eval_name)


def test_unknown_layout_raises(tmp_path):
    with pytest.raises(ValueError, match="layout must be one of 'flat', 'tinker', got 'nested'"):
        RunLogger(tmp_path / "r", layout="nested")
    with pytest.raises(ValueError, match="layout must be one of"):
        RunLogger(tmp_path / "r", layout="nested", rank=1)  # a non-writing rank checks it too
    assert not (tmp_path / "r").exists()


def test_tinker_layout_run_reads_back(tmp_path):
    root = tmp_path / "run"
    with RunLogger(root, layout="tinker", code_diff=False, index=False) as logger:
        for i in range(2):
            with logger.iteration(i):
                logtree.text(f"train {i}")
            with logger.evaluation("test", i):
                logtree.text(f"eval {i}")
            logger.log_rollouts(i, ONE)
            logger.log_rollouts(i, ONE, eval_name="test")
            logger.log_metrics(i, {"r": float(i)})
    assert [f for f in _files(root) if "iteration" in f] == sorted(
        [
            f"iteration_00000{i}/{f}"
            for i in range(2)
            for f in (
                "eval_test.html",
                "eval_test_logtree.json",
                "eval_test_rollout_summaries.jsonl",
                "train.html",
                "train_logtree.json",
                "train_rollout_summaries.jsonl",
            )
        ]
    )
    run = read_run(root)
    assert [(it.iteration, it.eval_names) for it in run.iterations] == [(0, ["test"]), (1, ["test"])]
    assert run.rollout_summaries(1, "test")[0]["split"] == "eval/test"
    assert "eval 1" in str(run.logtree(1, "test"))
    page = (root / "iteration_000001" / "train.html").read_text()
    for href in (
        'href="../index.html"',
        'href="../iteration_000000/train.html"',
        'href="../iteration_000002/train.html"',
    ):
        assert href in page


def test_tinker_layout_worker_and_resume(tmp_path):
    root = tmp_path / "run"
    logger = RunLogger(root, layout="tinker", code_diff=False, index=False)
    logger.log_rollouts(0, ONE)
    logger.log_metrics(0, {"r": 0.0})
    logger.log_checkpoint("000001", batch=1, state_path="s1")
    logger.log_rollouts(1, ONE)
    logger.log_metrics(1, {"r": 1.0})
    worker = pickle.loads(
        pickle.dumps(logger)
    )  # a second writer of the same iteration keeps the first's file
    assert worker.layout == "tinker"
    with pytest.warns(RuntimeWarning, match="kept it and wrote this one to iteration_000001-2/"):
        worker.log_rollouts(1, ONE)
        worker.close()
    logger.close()
    assert (root / "iteration_000001-2" / "train_rollout_summaries.jsonl").is_file()

    with RunLogger(root, layout="tinker", resume=True, code_diff=False, index=False) as resumed:
        assert resumed.resume_state.batch == 1
    files = _files(root)
    assert "iteration_000000/train_rollout_summaries.jsonl" in files
    assert "iteration_000001/train_rollout_summaries.jsonl" not in files  # the crashed run's, moved aside
    assert "superseded/iteration_000001/train_rollout_summaries.jsonl" in files

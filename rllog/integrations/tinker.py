"""tinker-cookbook's ``ml_log`` interface on top of :class:`rllog.RunLogger` (partial: metrics, config, long text).

A tinker-cookbook script switches by changing its import::

    from rllog.integrations.tinker import setup_logging   # was: from tinker_cookbook.utils.ml_log import setup_logging

    ml_logger = setup_logging(log_dir, config=cfg)
    ml_logger.log_metrics({"env/all/reward/total": r}, step=i)
    ml_logger.close()

:class:`RllogMlLogger` has ``ml_log.Logger``'s methods (tinker-cookbook 0.6.1,
``tinker_cookbook/utils/ml_log.py``): ``log_hparams(config)`` writes config.json,
``log_metrics(metrics, step=None)`` appends a row (``step=None``: the last step used, or 0),
``log_metrics_event``, ``log_summary`` (a no-op, as the base class), ``log_long_text(key,
text)`` (written to ``long_text/<key>.txt``, the key made file-name safe) and ``close``.
Not yet done: routing tinker-cookbook's own logtree calls and ``TrajectoryGroup``s inside
``rl/train.py`` into rllog's reports, and the tinker 0.6 ``iteration_NNNNNN/`` layout.
"""

from __future__ import annotations

import os
from typing import Any

from rllog._format.layout import safe_eval_name
from rllog._run import RunLogger

__all__ = ["RllogMlLogger", "setup_logging"]


class RllogMlLogger:
    """``ml_log.Logger``'s interface writing to an rllog run (:attr:`run_logger`)."""

    def __init__(self, run_logger: RunLogger) -> None:
        self.run_logger = run_logger
        self._last_step = 0

    def log_hparams(self, config: Any) -> None:
        """Write config.json (RunLogger's conversion and redaction)."""
        self.run_logger.log_config(config)

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Append ``{"step": step, **metrics}``; ``step=None`` uses the last step given (0 at first).

        Raises:
            TypeError, ValueError: as :meth:`rllog.RunLogger.log_metrics`.
        """
        if step is not None:
            self._last_step = step
        self.run_logger.log_metrics(self._last_step, metrics)

    def enable_event_steps(self) -> None:
        pass

    def log_metrics_event(
        self, metrics: dict[str, Any], step: int, step_metric: str, metric_axes: dict[str, str] | None = None
    ) -> None:
        self.log_metrics({**metrics, step_metric: step}, step=step)

    def log_summary(self, metrics: dict[str, Any]) -> None:
        pass  # ml_log: loggers without a summary channel leave this a no-op

    def log_long_text(self, key: str, text: str) -> None:
        """Write ``text`` to ``long_text/<safe key>.txt`` (replacing an earlier one of that key)."""
        storage = self.run_logger.storage
        if storage is None:  # a NullRunLogger (rank != 0)
            return
        try:
            storage.write(f"long_text/{safe_eval_name(key)}.txt", text.encode("utf-8", "surrogatepass"))
        except OSError as exc:
            self.run_logger._notes.warn_once("long_text", f"could not write long text {key!r}: {exc}")

    def close(self) -> None:
        self.run_logger.close()


def setup_logging(
    log_dir: str | os.PathLike[str],
    wandb_project: str | None = None,
    wandb_name: str | None = None,
    config: Any | None = None,
    do_configure_logging_module: bool = True,
    **options: Any,
) -> RllogMlLogger:
    """``ml_log.setup_logging``'s signature: an :class:`RllogMlLogger` writing ``log_dir``.
    ``wandb_project``/``wandb_name`` and ``do_configure_logging_module`` are accepted for
    compatibility and not used (rllog writes no W&B run); ``options`` go to RunLogger."""
    return RllogMlLogger(RunLogger(log_dir, config=config, **options))

"""Integrations with training frameworks: :mod:`rllog.integrations.trl` (TRL and any
transformers ``Trainer``) and :mod:`rllog.integrations.tinker` (tinker-cookbook's
``ml_log``). Each module imports its framework only when used (``pip install rllog[trl]``)."""

"""TEMPORARY shim during the issue-9 merge; removed once logtree imports rllog._format.layout."""
from rllog._format.layout import *  # noqa: F403
from rllog._format.layout import artifact_name, safe_eval_name  # noqa: F401

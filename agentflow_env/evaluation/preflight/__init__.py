"""The pre-flight check (``agentflow-env check``): one configuration's rollout inspected item by
item before training. ``check`` runs the items; the other modules hold the episodes they watch
(``episodes``), the expert's items (``expert``), the limit items (``limits``), the flat-token
items (``tokens``) and the report (``report``)."""

from agentflow_env.evaluation.preflight.check import (
    DEFAULT_ENV_ID,
    ITEMS,
    CheckItem,
    PreflightReport,
    run_preflight,
)

__all__ = ["DEFAULT_ENV_ID", "ITEMS", "CheckItem", "PreflightReport", "run_preflight"]

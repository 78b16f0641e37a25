"""The Gymnasium facade: ``AgentFlowEnv`` (``env.py``), one typed config per variant
(``config/``: ``SearchEnvConfig``, ``CodeEnvConfig``), the ``AgentFlow-Code-v0`` builder
(``code.py``), the ``Curriculum`` wrapper (``curriculum.py``), text rendering (``render.py``)
and the env ids (``registration.py``)."""

from agentflow_env.envs.curriculum import DEFAULT_LEVELS, Curriculum

__all__ = ["DEFAULT_LEVELS", "Curriculum"]

"""The Gymnasium facade: ``AgentFlowEnv`` (``env.py``, the one builder of every env id), one
typed config per variant (``config/``: ``SearchEnvConfig``, ``CodeEnvConfig``, the probes'),
the ``Curriculum`` wrapper (``curriculum.py``), text rendering (``render.py``) and the variant
rows and env ids (``registration.py``)."""

from agentflow_env.envs.curriculum import DEFAULT_LEVELS, Curriculum

__all__ = ["DEFAULT_LEVELS", "Curriculum"]

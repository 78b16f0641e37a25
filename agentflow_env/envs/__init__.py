"""Layer 6, the Gymnasium facade: ``AgentFlowEnv`` (``env.py``), one typed config per variant
(``config/``: ``SearchEnvConfig``, ``CodeEnvConfig``), the ``AgentFlow-Code-v0`` builder
(``code.py``), text rendering (``render.py``) and the env ids (``registration.py``)."""

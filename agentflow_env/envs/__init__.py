"""Layer 6, the Gymnasium facade: ``AgentFlowEnv`` (``env.py``), the ``AgentFlow-Code-v0``
variant (``code.py``), text rendering (``render.py``) and the env ids (``registration.py``)."""

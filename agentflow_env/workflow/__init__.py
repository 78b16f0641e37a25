"""One episode: the ``Session`` and what it is made of (memory, planner-action parsing,
action input, observations, planner prompts, rewards, trajectory records) and the protocols of
the frozen modules it calls (``frozen_modules.py``; their backends are ``agentflow_env.modules``)."""

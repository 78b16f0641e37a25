"""The env as a service: an OpenEnv server for any registered variant (``agentflow-env serve``).

- ``host``: the variant and settings one server process serves, shared by its sessions;
- ``served_env``: the OpenEnv ``Environment`` behind one WebSocket session;
- ``models``: its typed action, observation and state;
- ``app``: the server (OpenEnv's app, the ``/agentflow`` description, an optional token);
- ``ray_workers``: env servers as Ray actors across a cluster.

Needs the ``serve`` extra (OpenEnv); the client side is ``agentflow_env.remote``.
"""

"""Clients of served envs (``agentflow-env serve``, OpenEnv's protocol).

- ``RemoteEnv``: the Gymnasium env of a server (or several), the same ``reset``/``step`` returns
  as ``gym.make`` gives, token ids included;
- ``RemoteSession``: one remote episode shaped like a ``Session``, for the token-in-token-out
  drivers and the trainer adapters;
- ``EnvServers``: which server a new episode goes to (the fewest open sessions);
- ``wire``: what crosses, on both sides.

The connection is OpenEnv's ``EnvClient`` (the ``serve`` extra), imported on first use.
"""

from agentflow_env.remote.connection import ServiceError, ServiceUnavailable
from agentflow_env.remote.env import RemoteEnv, fetch_server_info
from agentflow_env.remote.servers import EnvServers, env_urls, shared_servers
from agentflow_env.remote.session import RemoteSession

__all__ = [
    "EnvServers",
    "RemoteEnv",
    "RemoteSession",
    "ServiceError",
    "ServiceUnavailable",
    "env_urls",
    "fetch_server_info",
    "shared_servers",
]

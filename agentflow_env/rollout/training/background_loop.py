"""Sessions for trainers that step envs from blocking code (SkyRL's ``BaseTextEnv.step``).

Such a trainer calls ``step`` from its own worker threads, one trajectory per call. Every session
of the process then runs on one event loop on a daemon thread (``BackgroundLoop``, whose home is
``agentflow_env.base.loop_runner``): the trajectories' tool calls and module requests interleave
there as they would under one async trainer, LLM clients keep one connection pool, and each
blocking caller waits only for its own coroutine.
"""

from __future__ import annotations

from agentflow_env.base.loop_runner import BackgroundLoop

__all__ = ["BackgroundLoop"]

"""The static trajectory viewer (``agentflow-env view``): a trajectory log as HTML pages opened
straight from disk. ``site`` writes the report; ``rows`` reads the log into episode rows,
``index``, ``episode`` and ``turn`` render the pages, ``plots`` the figures, ``html`` the
page frame (escaping is ``agentflow_env.evaluation.text``, shared with the eval plots)."""

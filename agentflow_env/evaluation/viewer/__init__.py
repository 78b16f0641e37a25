"""The static trajectory viewer (``agentflow-env view``): a trajectory log as HTML pages opened
straight from disk. ``site`` writes the report; ``rows`` reads the log into episode rows,
``index``, ``episode`` and ``turn`` render the pages, ``plots`` the figures, ``html`` and
``text`` the page frame and escaping (``plots`` of eval runs use ``text`` too, so this package
imports nothing itself)."""

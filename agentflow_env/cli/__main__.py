from agentflow_env.cli import main

raise SystemExit(main())

"""Layer 7, trainer-neutral driving of the envs.

- ``episodes``: whole episodes with a planner, and their summary;
- ``driver``: the batched rollout driver (many episodes, one generate call per turn, lockstep
  across ranks) that trains and evaluates;
- ``pool``: the env pool every adapter shares; ``labels``: trainer labels, episode plans and the
  ``AGENTFLOW_*`` adapter settings; ``spec``: ``TaskSpec`` labels naming an env and a task;
- ``token_episode``: one episode token-in-token-out over an async generate call, within a
  trainer's token budgets (verl's agent loop, SkyRL's generator); ``background_loop``: sessions
  for trainers that step envs from blocking code (SkyRL's ``BaseTextEnv``);
- ``token_check``: a trainer's token sequence against the env's, and the mismatch diagnosis;
  ``failures``: zero-reward failure samples and the errors that stop a run;
- ``hf_generation``: Hugging Face generation with the package's one log-prob definition;
- ``train_diagnostics``: trainer-neutral training diagnostics; ``logprob_check``: any trainer's
  recorded log-probs against a model's forward pass (``agentflow-env check-logprobs``);
  ``trainer_samples``: OpenRLHF's, verl's and SkyRL's sample objects read for both;
- ``demonstrations``, ``planners``, ``llm_planners``: expert demonstrations, scripted and
  model-backed planners.
"""

"""Evaluating planners: metrics over many episodes, ``eval`` and ablation runs, the frozen
evaluation suites, the pre-flight check and the static trajectory viewer."""

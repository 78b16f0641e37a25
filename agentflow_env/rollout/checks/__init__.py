"""Checks on what a rollout produced: failures and fail-fast, token-exactness, the log-prob gap
between sampler and trainer, and the training diagnostics read from each trainer's samples."""

"""Real verl's `rollout_trace_op` at its import path, for tool and agent code written for real verl: there it
records a call in a rollout trace (weave / mlflow); here rollouts keep their turns in each sample's
`extra["turns"]`, so the decorator returns the function unchanged."""

from __future__ import annotations


def rollout_trace_op(fn):
    return fn

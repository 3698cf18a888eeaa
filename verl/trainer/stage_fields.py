"""Which Batch fields (verl/batch.py) exist after which stage of `Trainer.algorithm_step`.

FILLS[stage]: the fields the stage fills on every run. MAY_FILL[stage]: those it fills only where the
algorithm, a role or an option asks for them (None otherwise). Every tensor field of the Batch is named
exactly once (tests/trainer/test_stage_fields.py); `check_filled` is how a stage says what it owes the next.
"""

from __future__ import annotations

FILLS = {
    "rollout": ("input_ids", "attention_mask", "position_ids", "responses", "response_mask", "scores"),
    "old_log_prob": ("old_log_probs",),  # or the actor update, where pi_old comes from its first forward
    "advantages": ("token_level_scores", "token_level_rewards", "advantages", "returns"),
}
MAY_FILL = {
    "rollout": ("rollout_log_probs",   # engines that report log-probs (all but sampling=False passes)
                "baseline_scores",     # ReMax's greedy baseline
                "reward_parts",        # estimators that read the reward components (gdpo)
                "routed_experts"),     # rollout.routing_replay: engine
    "old_log_prob": ("sum_pi_squared",),  # the optimal token baseline
    "ref_log_prob": ("ref_log_probs",),   # a KL term (loss or reward)
    "teacher_log_prob": ("teacher_log_probs",),  # distillation
    "values": ("values",),                # a critic
    "rollout_correction": ("is_weights",),  # the decoupled rollout correction
}


def check_filled(batch, stage: str) -> None:
    """RuntimeError naming the stage and the fields it should have filled but left None."""
    missing = [name for name in FILLS.get(stage, ()) if getattr(batch, name) is None]
    if missing:
        raise RuntimeError(f"the {stage} stage left Batch fields unset that later stages read: {', '.join(missing)}")

"""Real verl's on-policy distillation keys (`distillation.*`) -> this project's `distillation` section:
rows of `verl.compat.real_verl.TABLE`.

    distillation.enabled                                   -> distillation.enable
    distillation.teacher_models.teacher_model.model_path   -> distillation.teacher   (one teacher)
    distillation.distillation_loss.loss_mode               -> distillation.loss_mode (k1/kl, k2/mse, abs, k3/low_var_kl)
    ... use_task_rewards, distillation_loss_coef, loss_max_clamp, use_policy_gradient, clip_ratio(_low/_high)

Real verl serves its teachers from inference engines in a pool of their own (n_gpus_per_node, nnodes,
num_replicas, inference.*); here the one teacher runs in the trainer's process, its log-probs computed by
a forward pass and the model kept in host memory between passes: those keys are accepted with that note.
Its top-k forward KL (`forward_kl_topk`, the teacher's top-k log-probs at every position) and several
teachers routed by `teacher_key` are refused.
"""

from __future__ import annotations

from verl.compat.real_keys import as_bool, as_float, ignored, only, pick, reads, refuse, to
from verl.errors import ConfigError

D = "distillation"
LOSS = f"{D}.distillation_loss"
TEACHER = f"{D}.teacher_models.teacher_model"
# real verl's estimator names -> ours (verl.algorithms.kl)
LOSS_MODES = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "abs": "abs", "k3": "k3", "low_var_kl": "k3"}
IN_PROCESS = ("the teacher runs in the trainer's process here (a forward pass for its log-probs, the model in host "
              "memory between passes: distillation.offload_teacher)")


def _enabled(value, ctx, key):
    if not as_bool(value, key):
        return {}
    given = {k.split(".")[2] for k in ctx.given_keys if k.startswith(f"{D}.teacher_models.")}
    others = sorted(given - {"teacher_model"})
    if others:
        raise refuse(f"{D}.teacher_models.{others[0]}", "...", "several teachers routed by distillation.teacher_key; "
                     "one teacher (distillation.teacher_models.teacher_model) is supported")
    teacher = ctx.get(f"{TEACHER}.model_path")
    if not teacher:
        raise ConfigError(f"{TEACHER}.model_path: distillation.enabled=True needs the teacher's model")
    mode = ctx.get(f"{LOSS}.loss_mode")
    if mode == "forward_kl_topk":
        raise refuse(f"{LOSS}.loss_mode", mode, "the forward KL over the teacher's top-k log-probs at every position; "
                     "the estimator losses (k1, k2, k3/low_var_kl, abs) on the student's sampled tokens are supported")
    out = {f"{D}.enable": True, f"{D}.teacher": str(teacher),
           f"{D}.loss_mode": pick(mode, f"{LOSS}.loss_mode", LOSS_MODES),
           f"{D}.use_task_rewards": as_bool(ctx.get(f"{LOSS}.use_task_rewards"), f"{LOSS}.use_task_rewards"),
           f"{D}.loss_coef": as_float(ctx.get(f"{LOSS}.distillation_loss_coef"), f"{LOSS}.distillation_loss_coef"),
           f"{D}.use_policy_gradient": as_bool(ctx.get(f"{LOSS}.use_policy_gradient"), f"{LOSS}.use_policy_gradient")}
    clamp = ctx.get(f"{LOSS}.loss_max_clamp")
    if clamp is not None:
        out[f"{D}.loss_max_clamp"] = as_float(clamp, f"{LOSS}.loss_max_clamp")
    clip = ctx.get(f"{LOSS}.clip_ratio")
    for side in ("low", "high"):
        value = ctx.get(f"{LOSS}.clip_ratio_{side}")
        value = clip if value is None else value
        if value is not None:
            out[f"{D}.clip_ratio_{side}"] = as_float(value, f"{LOSS}.clip_ratio_{side}")
    return out


DISTILLATION_ENTRIES = [
    (f"{D}.enabled", dict(convert=_enabled, target="distillation.enable + distillation.teacher + its loss keys",
                          default=False, note="on-policy distillation from one teacher (docs/algorithms.md)")),
    (f"{TEACHER}.model_path", reads(f"{D}.teacher with distillation.enabled", default=None)),
    (f"{LOSS}.loss_mode", reads(f"{D}.loss_mode with distillation.enabled", default="k3",
                                note="k1/kl, k2/mse, abs, k3/low_var_kl; forward_kl_topk refused")),
    (f"{LOSS}.use_task_rewards", reads(f"{D}.use_task_rewards with distillation.enabled", default=True)),
    (f"{LOSS}.distillation_loss_coef", reads(f"{D}.loss_coef with distillation.enabled", default=1.0)),
    (f"{LOSS}.loss_max_clamp", reads(f"{D}.loss_max_clamp with distillation.enabled", default=None)),
    (f"{LOSS}.use_policy_gradient", reads(f"{D}.use_policy_gradient with distillation.enabled", default=False)),
    (f"{LOSS}.policy_loss_mode", only("vanilla", why="real verl supports only its vanilla loss here too")),
    (f"{LOSS}.clip_ratio", reads(f"{D}.clip_ratio_low/high with distillation.enabled", default=0.2)),
    (f"{LOSS}.clip_ratio_low", reads(f"{D}.clip_ratio_low with distillation.enabled", default=0.2)),
    (f"{LOSS}.clip_ratio_high", reads(f"{D}.clip_ratio_high with distillation.enabled", default=0.2)),
    (f"{LOSS}.topk", ignored("forward_kl_topk only (refused)")),
    (f"{LOSS}.log_prob_min_clamp", ignored("forward_kl_topk only (refused)")),
    (f"{TEACHER}.key", ignored("routes samples between several teachers; one teacher here")),
    (f"{TEACHER}.num_replicas", ignored(IN_PROCESS)),
    (f"{TEACHER}.inference.*", ignored(IN_PROCESS)),
    (f"{D}.n_gpus_per_node", ignored(IN_PROCESS)),
    (f"{D}.nnodes", ignored(IN_PROCESS)),
    (f"{D}.teacher_key", ignored("routes samples between several teachers; one teacher here")),
]

"""What happens around a step: logging, system metrics, progress, checkpoints, final save.

Kept apart from `Trainer.step()` so the step body is only the algorithm.
"""

from __future__ import annotations

import math

from verl.tracking import ProgressBar, Tracker, short_metrics, system_metrics
from verl.tracking.system import GpuUtilSampler, compute_mfu, gpu_peak_flops


class RunHooks:
    def __init__(self, trainer):
        self.trainer = trainer
        cfg = trainer.config
        self.tracker = Tracker(cfg.logging, trainer.output_dir, cfg.to_dict(), total_steps=cfg.training.total_steps)
        self.progress = None
        self.bad_steps = 0
        self.util = None
        if trainer.device.type == "cuda":
            self.util = GpuUtilSampler().start()
        self.n_params = sum(p.numel() for p in trainer.actor.model.parameters())
        self.peak_flops = None
        if trainer.device.type == "cuda":
            import torch

            self.peak_flops = gpu_peak_flops(torch.cuda.get_device_name(trainer.device))

    def before_training(self) -> None:
        t = self.trainer
        self.progress = ProgressBar(t.config.training.total_steps, t.config.logging.progress_bar,
                                    initial=t.global_step)

    def after_step(self, metrics: dict) -> dict:
        t = self.trainer
        step = t.global_step
        metrics.update(system_metrics(t.device, self.util))
        if self.peak_flops and "timing_s/update_actor" in metrics:
            # Actor update MFU: 6 N FLOPs per token (forward + backward) over every epoch.
            tokens = int(metrics["perf/total_tokens"]) * t.config.training.num_epochs
            metrics["perf/mfu"] = compute_mfu(self.n_params, tokens, metrics["timing_s/update_actor"], self.peak_flops)
        self._guard_nonfinite(metrics)
        self.tracker.log(metrics, step)
        if step == 1 or step % 10 == 0 or step == t.config.training.total_steps:
            self.tracker.log_samples(step, t.last_samples(4))
        if self.progress is not None:
            self.progress.update(1, {"reward": metrics["reward/mean"], "kl": metrics["actor/kl"]})
        if step >= t.config.training.total_steps:
            self.finish()
        out = dict(metrics)
        out.update(short_metrics(metrics))
        return out

    def _guard_nonfinite(self, metrics: dict) -> None:
        """Count consecutive steps whose update was dropped for NaN/Inf; stop after K."""
        bad = metrics.get("actor/nonfinite_updates", 0.0) > 0 or not math.isfinite(metrics.get("actor/pg_loss", 0.0))
        self.bad_steps = self.bad_steps + 1 if bad else 0
        if bad:
            print(f"warning: step {self.trainer.global_step}: non-finite loss or gradient norm; update skipped")
        if self.bad_steps >= self.trainer.config.training.max_bad_steps:
            from verl.trainer.errors import TrainingDiverged

            raise TrainingDiverged(
                f"{self.bad_steps} steps in a row had NaN/Inf losses or gradients; likely causes: learning rate "
                "too high (training.lr), fp16 overflow (use model.dtype: bfloat16 or float32), a reward that "
                "returns huge values (check reward_fn), or no gradient clipping (training.grad_clip)")

    def finish(self) -> None:
        t = self.trainer
        path = t.save_actor(t.output_dir)
        print(f"training finished at step {t.global_step}; actor saved to {path}")
        if self.progress is not None:
            self.progress.close()
        if self.util is not None:
            self.util.stop()
        self.tracker.close()

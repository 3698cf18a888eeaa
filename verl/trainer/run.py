"""A training run: the loop around `Trainer.step()` and everything a run does besides the algorithm.

    run = Run(trainer.algorithm_step, config=..., output_dir=..., counters=..., ...)   # Trainer.__init__ does this
    metrics = run.train()        # to training.total_steps (or training.max_minutes), then the final save
    metrics = run.step()         # or one step at a time (the seed's loop); run.close() ends it early

The Run is built from explicit parts (the config, the output folder, the counters, the run state,
the saver with its state I/O, the validator, the experience source, the device's memory readings)
and a step callable that returns a StepResult; it reads nothing else of the Trainer.

Around each step: before it, the first step's baseline answer and step-0 validation, and the prompt
loader's position (a stop that abandons the step rewinds to it). After it: validation -> system
metrics and MFU -> non-finite guard (stop after training.max_bad_steps bad steps in a row) -> log
-> runtime invariants -> periodic checkpoint (checkpoint.save_full_every / save_actor_every) ->
the final save at training.total_steps, or a full save and `StopTraining` when SIGINT/SIGTERM asked
for a stop (verl/signals.py). Guarantees: docs/reliability.md.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from verl.checkpoint.resume import prepare_run_dir
from verl.checkpoint.run_lock import hold_run_folder
from verl.signals import Interrupted, StopTraining, abandon_if_stopped, note_checkpoint, stop_requested
from verl.tracking import ProgressBar, Tracker, short_metrics, system_metrics
from verl.tracking.flops import model_shape, update_flops
from verl.tracking.system import GpuUtilSampler, compute_mfu, gpu_peak_flops
from verl.trainer.invariants import InvariantChecker
from verl.trainer.step_result import StepResult

BASELINE_NOTE = ("baseline: data.baseline_prompt is answered greedily before training and again after it, the same "
                 "prompt both times, to compare by eye (a tiny or untrained model's answer may be off-topic; "
                 "data.baseline_prompt: null skips it)")


def say(line: str) -> None:
    """One console line, above the progress bar; configured secrets never reach it (verl/redact.py)."""
    from tqdm import tqdm

    from verl.redact import redact

    tqdm.write(redact(line))


class Run:
    def __init__(self, step: Callable[[], StepResult], *, config, output_dir: str, counters, run_state, saver,
                 validator, experience, resume_point, device, memory=None):
        """step(): one step of the algorithm; counters: RunCounters (global_step, the bad-step streak);
        run_state: the parts a checkpoint holds (run_state.data is the prompt loader, run_state.actor the
        policy); saver: verl.checkpoint.run_saver.RunSaver; validator: verl.trainer.validation.Validator;
        experience: the experience source (closed with the run); resume_point: where the run starts,
        settled before the logger opens metrics.jsonl so that a resumed log has no duplicated steps;
        memory: the per-stage device-memory readings (StageMemory, CUDA only)."""
        self._step_fn, self.config, self.output_dir = step, config, output_dir
        self.counters, self.run_state, self.saver = counters, run_state, saver
        self.validator, self.experience, self.resume_point = validator, experience, resume_point
        self.device, self.memory = device, memory
        cfg = config
        # The folder's lock (taken by resolve_resume) belongs to this run until close().
        self._lock = hold_run_folder(output_dir)
        self._lock.adopt(self, say=say)
        prepare_run_dir(output_dir, resume_point, warn=say)
        self.tracker = Tracker(cfg.logging, output_dir, cfg.to_dict(), total_steps=cfg.training.total_steps)
        self.progress = None
        self.invariants = InvariantChecker(cfg, say)  # on-policy start, engine vs actor (invariants.py)
        self.done = False  # set by the final save, a stop or a run with nothing left to train
        self.util = None
        self.peak_flops = None
        if device.type == "cuda":
            import torch

            self.util = GpuUtilSampler(read_memory=memory.counters.device_used, on_memory=memory.observe_device).start()
            self.peak_flops = gpu_peak_flops(torch.cuda.get_device_name(device))
        self.model_shape = model_shape(run_state.actor.model)  # what the update's MFU counts (verl/tracking/flops.py)
        self.started = False
        self._step_start_data = None  # the prompt loader's state when the step in progress began
        self._baseline_before = None
        self.last_result: StepResult | None = None  # the last step's metrics and batch
        saver.restore(resume_point, say)
        for note in cfg.auto_notes():  # what model.dtype, rollout.name and the update's speed switches chose
            say(note)
        if saver.last_full:
            note_checkpoint(saver.last_full)  # a forced stop names it as the last completed checkpoint

    @property
    def global_step(self) -> int:
        return self.counters.global_step

    @property
    def last_batch(self):
        """The batch the last step trained on (None before the first)."""
        return self.last_result.batch if self.last_result is not None else None

    @property
    def bad_steps(self) -> int:
        """Consecutive steps with a non-finite loss or gradient so far (kept in the run's counters)."""
        return self.counters.bad_steps

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict:
        """The remaining steps to training.total_steps with a progress bar; the last step's metrics
        ({} when there was nothing to train)."""
        metrics = {}
        self._before_training()
        while not self.done:
            metrics = self.step()  # stops early when training.max_minutes is spent
        return metrics

    def step(self) -> dict:
        """One step with the run's cadence around it; its metrics, canonical and short names."""
        if self.progress is None and not self.done:
            self._before_training()
            if self.done:
                return {}
        self._before_step()
        try:
            result = self._step_fn()
        except Interrupted as exc:  # a stop request cut a wait short (verl/signals.py)
            self._stop_mid_step(exc)  # saves the last completed step, raises StopTraining
        self.last_result = result
        return self._after_step(result)

    def _before_training(self) -> None:
        cfg = self.config
        if self.resume_point.final_save:
            self.finish(redo=True)  # the state of the last step is back; only its final save was cut short
            return
        if self.global_step >= cfg.training.total_steps:
            say(self.resume_point.note or f"already at step {self.global_step} of "
                f"training.total_steps={cfg.training.total_steps}; nothing to train")
            self.done = True
            self.close()  # nothing will be written: let go of the folder
            return
        if stop_requested():
            raise StopTraining(f"stopped by {stop_requested()} before the first step; nothing to save")
        self.progress = ProgressBar(cfg.training.total_steps, cfg.logging.progress_bar, initial=self.global_step)

    def _before_step(self) -> None:
        """Before the first step of this process: the baseline prompt's answer and, with
        validation on, the untrained policy's held-out scores (logged at step 0). A stop request
        during them ends the run at once: nothing was trained, so there is nothing to save."""
        # A step that a stop abandons before its update (stop_mid_step) must draw the same prompts on resume.
        self._step_start_data = self.run_state.data.state_dict()
        if self.started:
            return
        self.started = True
        self.started_at = time.monotonic()
        if self.global_step == 0:
            try:
                self._baseline("before")
                if self.validator.enabled and self.config.training.val_every:
                    self._validate(0)
                abandon_if_stopped("the start of step 1")
            except Interrupted as exc:
                self.close()
                raise StopTraining(f"{exc}; nothing was trained yet, so there is nothing to save") from None

    def _validate(self, step: int) -> dict:
        metrics, samples = self.validator.run(step)
        self.tracker.log_samples(step, samples)
        if step == 0:
            self.tracker.log(metrics, 0)
        return metrics

    def _baseline(self, when: str) -> None:
        """data.baseline_prompt's greedy answer before training and after it (text.jsonl, the report), and on
        the console with what it is for: the same prompt answered before and after, to compare by eye."""
        answer = self.validator.baseline_answer()
        if answer is None:
            return
        prompt = self.config.data.baseline_prompt
        self.tracker.log_text(f"baseline/{when}", f"{prompt} -> {answer}", self.global_step, quiet=True)
        if "console" not in self.config.logging.backends:
            return
        if when == "before":
            self._baseline_before = answer
            say(BASELINE_NOTE)
            say(f"[baseline before training] {prompt!r} -> {answer!r}")
        else:
            before = self._baseline_before
            was = f" (before training: {before!r})" if before is not None else ""
            say(f"[baseline after step {self.global_step}] {prompt!r} -> {answer!r}{was}")

    def _out_of_time(self) -> bool:
        """training.max_minutes: stop (with final validation and save) once the budget is spent."""
        limit = self.config.training.max_minutes
        return bool(limit) and (time.monotonic() - self.started_at) / 60.0 >= limit

    def _after_step(self, result: StepResult) -> dict:
        cfg = self.config
        step = self.global_step
        metrics = dict(result.metrics)
        val_every = cfg.training.val_every
        last = step >= cfg.training.total_steps or self._out_of_time()
        if self.validator.enabled and val_every and (step % val_every == 0 or last):
            try:
                metrics.update(self._validate(step))
            except Interrupted:
                pass  # a stop cut the validation short; the step itself is complete and is saved below
        metrics.update(system_metrics(self.device, self.util, self.memory.step_peak() if self.memory else None))
        if self.peak_flops and "timing_s/update_actor" in metrics:
            # Actor update MFU: forward + backward over every sequence of the batch, every epoch.
            flops = update_flops(self.model_shape, *result.sequence_lengths()) * cfg.training.num_epochs
            metrics["perf/mfu"] = compute_mfu(flops, metrics["timing_s/update_actor"], self.peak_flops)
        diverged = self._guard_nonfinite(metrics)
        self.tracker.log(metrics, step)
        if step == 1 or step % 10 == 0 or step == cfg.training.total_steps:
            self.tracker.log_samples(step, result.samples(4))
        if self.progress is not None:
            self.progress.update(1, {"reward": metrics["reward/mean"], "kl": metrics["actor/kl"]})
        if diverged:
            self._stop_diverged()
        self.invariants.after_step(step, metrics)  # a broken step stops before it is saved
        self._periodic_save(step)
        if last:
            self.finish()
        elif stop_requested():
            self._stop_on_signal(stop_requested())
        out = dict(metrics)
        out.update(short_metrics(metrics))
        return out

    def _guard_nonfinite(self, metrics: dict) -> bool:
        """Count steps whose loss or gradient norm was NaN/Inf (the workers already dropped
        those updates, see `guarded_step`); True once training.max_bad_steps came in a row."""
        step = self.global_step
        bad = (metrics.get("actor/nonfinite_updates", 0.0) > 0 or metrics.get("critic/nonfinite_updates", 0.0) > 0
               or not all(math.isfinite(metrics.get(k, 0.0)) for k in ("actor/pg_loss", "critic/vf_loss")))
        c = self.counters
        if bad:
            c.bad_steps += 1
            c.skipped_steps += 1
            say(f"warning: step {step}: non-finite loss or gradient norm; update skipped "
                f"({c.bad_steps} in a row, {c.skipped_steps} in this run)")
        else:
            c.bad_steps = 0
            c.last_good_step = step
        metrics.setdefault("actor/nonfinite_updates", 0.0)  # no actor update during critic warm-up
        metrics["training/skipped_steps"] = float(c.skipped_steps)
        return c.bad_steps >= self.config.training.max_bad_steps

    # ------------------------------------------------------------------ stops
    def _stop_diverged(self) -> None:
        from verl.trainer.errors import TrainingDiverged

        before = self.saver.latest_full_on_disk()
        # Non-finite updates were dropped, so the weights are finite; keep older checkpoints (no pruning).
        path = self.saver.save("full", "diverged", prune=False)
        self.close()
        c = self.counters
        raise TrainingDiverged(
            f"{c.bad_steps} steps in a row (steps {self.global_step - c.bad_steps + 1}..{self.global_step}) had "
            "NaN/Inf losses or gradients; likely causes: learning rate too high (training.lr), fp16 overflow (use "
            "model.dtype: bfloat16 or float32), a reward that returns huge values (check reward_fn), or no gradient "
            f"clipping (training.grad_clip). Last good step: {c.last_good_step}; the state at the stop (bad "
            f"updates dropped) is saved in {path}" + (f"; the checkpoint before it is {before}" if before else ""))

    def _stop_on_signal(self, name: str) -> None:
        path = self.saver.save_full_once(f"signal {name}")  # a periodic save of this step, or a new one
        self.close()
        raise StopTraining(f"stopped by {name} after step {self.global_step} of {self.config.training.total_steps}; "
                           f"full state saved to {path}; continue with the same command plus --resume auto")

    def _stop_mid_step(self, exc: Interrupted) -> None:
        """A stop request cut the step in progress short in one of its waits (generation's reward
        scoring, see verl/signals.py), before its update: the weights, optimizers and counters
        are still those of the last completed step. Rewind the prompt loader to where the step began,
        save that state (unless it is already on disk) and raise StopTraining."""
        total = self.config.training.total_steps
        if self._step_start_data is not None:
            self.experience.close()  # (asynchronous) no producer draws while the loader is rewound
            self.run_state.data.load_state_dict(self._step_start_data)
        if self.global_step == 0:
            self.close()
            raise StopTraining(f"{exc} of step 1; nothing was trained yet, so there is nothing to save")
        path = self.saver.save_full_once(f"signal {stop_requested() or 'request'}")
        self.close()
        raise StopTraining(f"{exc} of step {self.global_step + 1} of {total}; that step was abandoned; the full state "
                           f"after step {self.global_step} is saved in {path}; continue with the same command plus "
                           "--resume auto")

    # ------------------------------------------------------------------ saving
    def _periodic_save(self, step: int) -> None:
        ck = self.config.checkpoint
        if ck.save_full_every and step % ck.save_full_every == 0:
            self.saver.save("full", "periodic")
        elif ck.save_actor_every and step % ck.save_actor_every == 0:
            self.saver.save("lora" if ck.save_mode == "lora" else "actor", "periodic")

    def finish(self, redo: bool = False) -> None:
        """The final save (checkpoint.save_mode, verl/checkpoint/run_saver.py) and the run's end; then the
        baseline prompt's answer after training (an extra, after everything is saved, so a stop during it
        loses nothing). `redo`: a resume found the last final save incomplete and redoes it."""
        cfg = self.config
        mode = cfg.checkpoint.save_mode
        complete = self.global_step >= cfg.training.total_steps  # else: training.max_minutes ran out
        full = self.saver.save_final(mode, complete, cfg.training.total_steps)
        if not (redo and self._logged_text("baseline/after", self.global_step)):
            try:
                self._baseline("after")
            except Interrupted:
                say("the baseline prompt's answer after training was skipped: a stop was requested")
        what = "LoRA adapters" if mode == "lora" else "actor"
        ended = "finished" if complete else "stopped (training.max_minutes)"
        print(f"training {ended} at step {self.global_step}; {what} saved to {self.output_dir}"
              + (f"; full state in {full}" if full else "")
              + ("" if complete else "; continue with --resume auto"))
        self.done = True
        self.close()

    def _logged_text(self, key: str, step: int) -> bool:
        """Whether text.jsonl already has `key` at `step` (a redone final save logs it once)."""
        import os

        from verl.tracking.plot import read_jsonl

        rows = read_jsonl(os.path.join(self.output_dir, "text.jsonl"))
        return any(row.get("key") == key and row.get("step") == step for row in rows)

    def close(self) -> None:
        """The run's end: the asynchronous producer stops, the logs close, the folder is let go of."""
        self.done = True
        self.experience.close()
        if self.progress is not None:
            self.progress.close()
        if self.util is not None:
            self.util.stop()
            self.util = None
        self.tracker.close()
        self._lock.release(self)  # another run may use the folder now

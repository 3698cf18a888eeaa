"""The run's lifecycle around the steps (RunLifecycle): the restore of where the run starts, the
held run folder, logging, system metrics, progress, checkpoints, final save, the NaN/Inf guard and
graceful stops.

Kept apart from `Trainer.step()` so the step body is only the algorithm.

Around each step (after_step): log -> non-finite guard (stop after training.max_bad_steps
bad steps in a row) -> periodic checkpoint (checkpoint.save_full_every / save_actor_every)
-> final save at training.total_steps, or a full save and `StopTraining` when SIGINT/SIGTERM
asked for a stop (see verl/signals.py). At construction the run resumes from
`checkpoint.resume` (see verl/checkpoint/resume.py). Guarantees: docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

from verl.trainer.invariants import InvariantChecker
from verl.tracking import ProgressBar, Tracker, short_metrics, system_metrics
from verl.tracking.flops import model_shape, update_flops
from verl.tracking.system import GpuUtilSampler, compute_mfu, gpu_peak_flops
from verl.checkpoint.manager import CheckpointError, CheckpointManager
from verl.checkpoint.durable_files import test_kill_point
from verl.checkpoint.model_files import (check_lora_model, load_module_weights, save_lora_adapters,
                                      save_model_folder, save_pretrained_into)
from verl.checkpoint.resume import prepare_run_dir, write_run_state
from verl.checkpoint.run_folder import file_records
from verl.checkpoint.run_lock import hold_run_folder
from verl.signals import (Interrupted, StopTraining, abandon_if_stopped, checkpoint_write, note_checkpoint,
                                  stop_requested)


BASELINE_NOTE = ("baseline: data.baseline_prompt is answered greedily before training and again after it, the same "
                 "prompt both times, to compare by eye (a tiny or untrained model's answer may be off-topic; "
                 "data.baseline_prompt: null skips it)")


class RunLifecycle:
    def __init__(self, trainer, resume_point):
        """resume_point: where the run starts (fresh, a checkpoint, already finished), settled before
        the logger opens metrics.jsonl, so that a resumed log continues without duplicated steps."""
        self.trainer = trainer
        cfg = trainer.config
        self.resume_point = resume_point
        # The folder's lock (taken by resolve_resume) belongs to this run until close().
        self._lock = hold_run_folder(trainer.output_dir)
        self._lock.adopt(self, say=self._say)
        prepare_run_dir(trainer.output_dir, self.resume_point, warn=self._say)
        self.checkpoints = CheckpointManager(trainer.output_dir, cfg.checkpoint.keep_last)
        self.tracker = Tracker(cfg.logging, trainer.output_dir, cfg.to_dict(), total_steps=cfg.training.total_steps)
        self.progress = None
        self.counters = trainer.counters  # global_step, bad-step streak, skipped steps (saved with the state)
        self.invariants = InvariantChecker(cfg, self._say)  # on-policy start, engine vs actor (invariants.py)
        self.state_io = trainer.backend.state_io  # the full-state layout of this backend
        self._full_saved_at = -1
        self._full_path = None  # the full checkpoint saved (or restored) at step _full_saved_at
        self.finished = False  # set by finish(); Trainer.train() stops on it
        self.util = None
        if trainer.device.type == "cuda":
            memory = trainer.timer.memory  # per-stage device-memory peaks from the sampler's readings
            self.util = GpuUtilSampler(read_memory=memory.counters.device_used, on_memory=memory.observe_device).start()
        self.model_shape = model_shape(trainer.actor.model)  # what the update's MFU counts (verl/tracking/flops.py)
        self.peak_flops = None
        if trainer.device.type == "cuda":
            import torch

            self.peak_flops = gpu_peak_flops(torch.cuda.get_device_name(trainer.device))
        from verl.trainer.validation import Validator

        self.validator = Validator(trainer.rollout, trainer.reward, trainer.tokenizer, cfg, trainer.val_rows,
                                   trainer.tool_schemas, say=self._say, log_samples=self.tracker.log_samples)
        self.started = False
        self._step_start_data = None  # the prompt loader's state when the step in progress began
        self._restore()
        for note in cfg.auto_notes():  # what model.dtype, rollout.name and the update's speed switches chose
            self._say(note)
        if self._full_path:
            note_checkpoint(self._full_path)  # a forced stop names it as the last completed checkpoint

    @property
    def bad_steps(self) -> int:
        """Consecutive steps with a non-finite loss or gradient so far (kept in the run's counters)."""
        return self.counters.bad_steps

    # ------------------------------------------------------------------ resume
    def _restore(self) -> None:
        t, point = self.trainer, self.resume_point
        if point.path is not None:
            self.state_io.restore_full_state(t.run_state, point.path)  # counters included
            self._full_saved_at, self._full_path = t.global_step, point.path
        elif point.finished:
            self._load_final_actor()
            self.counters.global_step = point.step
        if point.note and not point.finished:
            self._say(point.note)

    def _load_final_actor(self) -> None:
        """A finished run without a full state at its last step: show the final actor."""
        t = self.trainer
        try:
            load_module_weights(t.actor.model, t.output_dir)
            t.rollout.sync_weights(t.actor.model)
        except CheckpointError as exc:
            self._say(f"warning: could not load the final actor from {t.output_dir}: {exc}")

    def _say(self, line: str) -> None:
        from tqdm import tqdm

        from verl.redact import redact

        tqdm.write(redact(line))  # configured secrets never reach the console (verl/redact.py)

    def before_training(self) -> None:
        t = self.trainer
        if self.resume_point.final_save and not self.finished:
            self.finish(redo=True)  # the state of the last step is back; only its final save was cut short
            return
        if t.global_step >= t.config.training.total_steps:
            self._say(self.resume_point.note or f"already at step {t.global_step} of "
                      f"training.total_steps={t.config.training.total_steps}; nothing to train")
            self.close()  # nothing will be written: let go of the folder
            return
        if stop_requested():
            raise StopTraining(f"stopped by {stop_requested()} before the first step; nothing to save")
        self.progress = ProgressBar(t.config.training.total_steps, t.config.logging.progress_bar,
                                    initial=t.global_step)

    def before_step(self) -> None:
        """Before the first step of this process: the baseline prompt's answer and, with
        validation on, the untrained policy's held-out scores (logged at step 0). A stop request
        during them ends the run at once: nothing was trained, so there is nothing to save."""
        t = self.trainer
        # A step that a stop abandons before its update (stop_mid_step) must draw the same prompts on resume.
        self._step_start_data = t.run_state.data.state_dict()
        if self.started:
            return
        self.started = True
        self.started_at = time.monotonic()
        if t.global_step == 0:
            try:
                self._baseline("before")
                if self.validator.enabled and t.config.training.val_every:
                    self.tracker.log(self.validator.run(0), 0)
                abandon_if_stopped("the start of step 1")
            except Interrupted as exc:
                self.close()
                raise StopTraining(f"{exc}; nothing was trained yet, so there is nothing to save") from None

    def _baseline(self, when: str) -> None:
        """data.baseline_prompt's greedy answer before training and after it (text.jsonl, the report), and on
        the console with what it is for: the same prompt answered before and after, to compare by eye."""
        answer = self.validator.baseline_answer()
        if answer is None:
            return
        t = self.trainer
        prompt = t.config.data.baseline_prompt
        self.tracker.log_text(f"baseline/{when}", f"{prompt} -> {answer}", t.global_step, quiet=True)
        if "console" not in t.config.logging.backends:
            return
        if when == "before":
            self._baseline_before = answer
            self._say(BASELINE_NOTE)
            self._say(f"[baseline before training] {prompt!r} -> {answer!r}")
        else:
            before = getattr(self, "_baseline_before", None)
            was = f" (before training: {before!r})" if before is not None else ""
            self._say(f"[baseline after step {t.global_step}] {prompt!r} -> {answer!r}{was}")

    def _out_of_time(self) -> bool:
        """training.max_minutes: stop (with final validation and save) once the budget is spent."""
        limit = self.trainer.config.training.max_minutes
        return bool(limit) and (time.monotonic() - self.started_at) / 60.0 >= limit

    def after_step(self, metrics: dict) -> dict:
        t = self.trainer
        step = t.global_step
        val_every = t.config.training.val_every
        last = step >= t.config.training.total_steps or self._out_of_time()
        if self.validator.enabled and val_every and (step % val_every == 0 or last):
            try:
                metrics.update(self.validator.run(step))
            except Interrupted:
                pass  # a stop cut the validation short; the step itself is complete and is saved below
        metrics.update(system_metrics(t.device, self.util, t.timer.memory.step_peak() if t.timer.memory else None))
        if self.peak_flops and "timing_s/update_actor" in metrics:
            # Actor update MFU: forward + backward over every sequence of the batch, every epoch.
            b = t._last_batch
            prompts = b.attention_mask[:, :b.prompt_length].sum(dim=1).tolist()
            responses = b.attention_mask[:, b.prompt_length:].sum(dim=1).tolist()
            flops = update_flops(self.model_shape, prompts, responses) * t.config.training.num_epochs
            metrics["perf/mfu"] = compute_mfu(flops, metrics["timing_s/update_actor"], self.peak_flops)
        diverged = self._guard_nonfinite(metrics)
        self.tracker.log(metrics, step)
        if step == 1 or step % 10 == 0 or step == t.config.training.total_steps:
            self.tracker.log_samples(step, t.last_samples(4))
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
        step = self.trainer.global_step
        bad = (metrics.get("actor/nonfinite_updates", 0.0) > 0 or metrics.get("critic/nonfinite_updates", 0.0) > 0
               or not all(math.isfinite(metrics.get(k, 0.0)) for k in ("actor/pg_loss", "critic/vf_loss")))
        c = self.counters
        if bad:
            c.bad_steps += 1
            c.skipped_steps += 1
            self._say(f"warning: step {step}: non-finite loss or gradient norm; update skipped "
                      f"({c.bad_steps} in a row, {c.skipped_steps} in this run)")
        else:
            c.bad_steps = 0
            c.last_good_step = step
        metrics.setdefault("actor/nonfinite_updates", 0.0)  # no actor update during critic warm-up
        metrics["training/skipped_steps"] = float(c.skipped_steps)
        return c.bad_steps >= self.trainer.config.training.max_bad_steps

    def _stop_diverged(self) -> None:
        from verl.trainer.errors import TrainingDiverged

        t = self.trainer
        before = self.checkpoints.find_latest("full", checksums=False, warn=lambda _: None)
        # Non-finite updates were dropped, so the weights are finite; keep older checkpoints (no pruning).
        path = self.save_checkpoint("full", "diverged", prune=False)
        self.close()
        raise TrainingDiverged(
            f"{self.counters.bad_steps} steps in a row (steps {t.global_step - self.counters.bad_steps + 1}.."
            f"{t.global_step}) had NaN/Inf "
            "losses or gradients; likely causes: learning rate too high (training.lr), fp16 overflow (use "
            "model.dtype: bfloat16 or float32), a reward that returns huge values (check reward_fn), or no gradient "
            f"clipping (training.grad_clip). Last good step: {self.counters.last_good_step}; the state at the stop (bad "
            f"updates dropped) is saved in {path}" + (f"; the checkpoint before it is {before}" if before else ""))

    def _stop_on_signal(self, name: str) -> None:
        t = self.trainer
        path = (self._full_path if self._full_saved_at == t.global_step  # a periodic save of this step
                else self.save_checkpoint("full", f"signal {name}"))
        self.close()
        raise StopTraining(f"stopped by {name} after step {t.global_step} of {t.config.training.total_steps}; "
                           f"full state saved to {path}; continue with the same command plus --resume auto")

    def stop_mid_step(self, exc: Interrupted) -> None:
        """A stop request cut the step in progress short in one of its waits (generation's reward
        scoring, see verl/signals.py), before its update: the weights, optimizers and counters
        are still those of the last completed step. Rewind the prompt loader to where the step began,
        save that state (unless it is already on disk) and raise StopTraining."""
        t = self.trainer
        total = t.config.training.total_steps
        if self._step_start_data is not None:
            t.experience.close()  # (asynchronous) no producer draws while the loader is rewound
            t.run_state.data.load_state_dict(self._step_start_data)
        if t.global_step == 0:
            self.close()
            raise StopTraining(f"{exc} of step 1; nothing was trained yet, so there is nothing to save")
        path = (self._full_path if self._full_saved_at == t.global_step
                else self.save_checkpoint("full", f"signal {stop_requested() or 'request'}"))
        self.close()
        raise StopTraining(f"{exc} of step {t.global_step + 1} of {total}; that step was abandoned; the full state "
                           f"after step {t.global_step} is saved in {path}; continue with the same command plus "
                           "--resume auto")

    # ------------------------------------------------------------------ saving
    def _periodic_save(self, step: int) -> None:
        ck = self.trainer.config.checkpoint
        if ck.save_full_every and step % ck.save_full_every == 0:
            self.save_checkpoint("full", "periodic")
        elif ck.save_actor_every and step % ck.save_actor_every == 0:
            self.save_checkpoint("lora" if ck.save_mode == "lora" else "actor", "periodic")

    def save_checkpoint(self, kind: str = "full", reason: str = "manual", prune: bool = True) -> str:
        """Atomic checkpoint `checkpoints/step_NNNNNN` of `kind`: full (resumable), actor (Hugging
        Face folder, LoRA merged) or lora (adapters). Returns its folder."""
        t = self.trainer
        if kind == "full":
            def write(folder):
                return self.state_io.write_full_state(t.run_state, folder, reason)
        elif kind == "lora":
            def write(folder):
                save_lora_adapters(t.actor.model, t.tokenizer, os.path.join(folder, "actor"))
        else:
            def write(folder):
                save_pretrained_into(t.actor.model, t.tokenizer, os.path.join(folder, "actor"), merge_lora=True)
        with checkpoint_write(), _disk_errors(f"step {t.global_step}'s checkpoint", self.checkpoints.root):
            path = self.checkpoints.save(t.global_step, kind, write, prune=prune, meta={"reason": reason})
            note_checkpoint(path, resumable=kind == "full")
        if kind == "full":
            self._full_saved_at, self._full_path = t.global_step, path
        return path

    def finish(self, redo: bool = False) -> None:
        """The final save (checkpoint.save_mode) and the run's end: the actor (or the LoRA
        adapters) in save_dir itself, plus the full state under checkpoints/ for `full`; then the
        baseline prompt's answer after training (an extra, after everything is saved).
        run_state.json, written last, lists the final files (sizes, checksums): a resume that
        finds them incomplete redoes this from the full state of the last step (`redo`)."""
        t = self.trainer
        mode = t.config.checkpoint.save_mode
        complete = t.global_step >= t.config.training.total_steps  # else: training.max_minutes ran out
        full = None
        if mode == "full" or not complete:  # an early stop keeps a resumable state
            full = (self._full_path if self._full_saved_at == t.global_step
                    else self.save_checkpoint("full", "final" if complete else "time budget"))
        if mode == "lora":
            check_lora_model(t.actor.model)
        with _disk_errors("the final save", t.output_dir):
            files = save_model_folder(t.actor.model, t.tokenizer, t.output_dir, merge_lora=mode != "lora")
            path = t.output_dir
            test_kill_point("final_before_run_state")
            write_run_state(t.output_dir, finished=complete, global_step=t.global_step,
                            total_steps=t.config.training.total_steps, save_mode=mode, full_state=full,
                            final_files=file_records(t.output_dir, files))
        test_kill_point("final_after_run_state")
        # The optional extras come after the save, so a stop during them loses nothing.
        if not (redo and self._logged_text("baseline/after", t.global_step)):
            try:
                self._baseline("after")
            except Interrupted:
                self._say("the baseline prompt's answer after training was skipped: a stop was requested")
        what = "LoRA adapters" if mode == "lora" else "actor"
        ended = "finished" if complete else "stopped (training.max_minutes)"
        print(f"training {ended} at step {t.global_step}; {what} saved to {path}"
              + (f"; full state in {full}" if full else "")
              + ("" if complete else "; continue with --resume auto"))
        self.finished = True
        self.close()

    def _logged_text(self, key: str, step: int) -> bool:
        """Whether text.jsonl already has `key` at `step` (a redone final save logs it once)."""
        from verl.tracking.plot import read_jsonl

        rows = read_jsonl(os.path.join(self.trainer.output_dir, "text.jsonl"))
        return any(row.get("key") == key and row.get("step") == step for row in rows)

    def close(self) -> None:
        self.trainer.experience.close()  # an asynchronous rollout's producer stops
        if self.progress is not None:
            self.progress.close()
        if self.util is not None:
            self.util.stop()
            self.util = None
        self.tracker.close()
        self._lock.release(self)  # another run may use the folder now


@contextlib.contextmanager
def _disk_errors(what: str, folder: str):
    """A save that the file system refuses (a folder made read-only, a full disk) becomes one line
    (CheckpointError: exit 2) naming the folder and the reason; the saves before it are untouched
    (each is written into a temporary folder first)."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or folder
        raise CheckpointError(f"checkpoint.save_dir: {what} could not be written to {where}: {exc.strerror or exc}; "
                              "the checkpoints saved before it are kept; free or fix the folder and continue "
                              "with --resume auto") from None

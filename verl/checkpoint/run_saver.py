"""What a run writes to its folder and reads back: checkpoints of the current step, the final save, and
the restore of where a run starts. Acts on a RunState (verl/checkpoint/full_state.py) through the
backend's state I/O; knows nothing of the loop that calls it.

    saver = RunSaver(save_dir, run_state, state_io, keep_last=3)
    saver.restore(resume_point, say)          # a full state back into freshly built parts, or the final actor
    saver.save("full", "periodic")            # checkpoints/step_NNNNNN, atomic; returns its folder
    saver.full_of_this_step()                 # that folder when the current step already has one, else None
    saver.save_final("full", complete=True)   # the actor (or adapters) in save_dir, then run_state.json
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable

from verl.checkpoint.durable_files import test_kill_point
from verl.checkpoint.manager import CheckpointError, CheckpointManager
from verl.checkpoint.model_files import (check_lora_model, load_module_weights, save_lora_adapters,
                                         save_model_folder, save_pretrained_into)
from verl.checkpoint.resume import write_run_state
from verl.checkpoint.run_folder import file_records
from verl.signals import checkpoint_write, note_checkpoint


class RunSaver:
    def __init__(self, output_dir: str, run_state, state_io, keep_last: int):
        """run_state: the parts a full checkpoint holds (their counters give the step); state_io: the
        backend's layout of a full state (write_full_state / restore_full_state)."""
        self.output_dir, self.run_state, self.state_io = output_dir, run_state, state_io
        self.checkpoints = CheckpointManager(output_dir, keep_last)
        self._full_saved_at = -1
        self._full_path = None  # the full checkpoint saved (or restored) at step _full_saved_at

    @property
    def step(self) -> int:
        return self.run_state.counters.global_step

    def full_of_this_step(self) -> str | None:
        """The full checkpoint of the current step, when one was saved or restored."""
        return self._full_path if self._full_saved_at == self.step else None

    @property
    def last_full(self) -> str | None:
        return self._full_path

    def latest_full_on_disk(self) -> str | None:
        return self.checkpoints.find_latest("full", checksums=False, warn=lambda _: None)

    # ------------------------------------------------------------------ where the run starts
    def restore(self, point, say: Callable[[str], None]) -> None:
        """A resume point's state back into the parts: a full checkpoint (counters included), or for a
        finished run without one the final actor (synced into the engine), with the point's note."""
        if point.path is not None:
            self.state_io.restore_full_state(self.run_state, point.path)
            self._full_saved_at, self._full_path = self.step, point.path
        elif point.finished:
            self._load_final_actor(say)
            self.run_state.counters.global_step = point.step
        if point.note and not point.finished:
            say(point.note)

    def _load_final_actor(self, say) -> None:
        rs = self.run_state
        try:
            load_module_weights(rs.actor.model, self.output_dir)
            rs.rollout.sync_weights(rs.actor.model)
        except CheckpointError as exc:
            say(f"warning: could not load the final actor from {self.output_dir}: {exc}")

    # ------------------------------------------------------------------ saving
    def save(self, kind: str = "full", reason: str = "manual", prune: bool = True) -> str:
        """Atomic checkpoint `checkpoints/step_NNNNNN` of `kind`: full (resumable), actor (Hugging
        Face folder, LoRA merged) or lora (adapters). Returns its folder."""
        rs = self.run_state
        if kind == "full":
            def write(folder):
                return self.state_io.write_full_state(rs, folder, reason)
        elif kind == "lora":
            def write(folder):
                save_lora_adapters(rs.actor.model, rs.tokenizer, os.path.join(folder, "actor"))
        else:
            def write(folder):
                save_pretrained_into(rs.actor.model, rs.tokenizer, os.path.join(folder, "actor"), merge_lora=True)
        with checkpoint_write(), disk_errors(f"step {self.step}'s checkpoint", self.checkpoints.root):
            path = self.checkpoints.save(self.step, kind, write, prune=prune, meta={"reason": reason})
            note_checkpoint(path, resumable=kind == "full")
        if kind == "full":
            self._full_saved_at, self._full_path = self.step, path
        return path

    def save_full_once(self, reason: str) -> str:
        """The full checkpoint of the current step: the one already saved, or a new one."""
        return self.full_of_this_step() or self.save("full", reason)

    def save_final(self, mode: str, complete: bool, total_steps: int) -> str | None:
        """checkpoint.save_mode's final save: the actor (or the LoRA adapters) in save_dir itself, plus
        the full state under checkpoints/ for `full` or an early stop (returned). run_state.json,
        written last, lists the final files (sizes, checksums): a resume that finds them incomplete
        redoes this from the full state of the last step."""
        rs = self.run_state
        full = None
        if mode == "full" or not complete:  # an early stop keeps a resumable state
            full = self.save_full_once("final" if complete else "time budget")
        if mode == "lora":
            check_lora_model(rs.actor.model)
        with disk_errors("the final save", self.output_dir):
            files = save_model_folder(rs.actor.model, rs.tokenizer, self.output_dir, merge_lora=mode != "lora")
            test_kill_point("final_before_run_state")
            write_run_state(self.output_dir, finished=complete, global_step=self.step, total_steps=total_steps,
                            save_mode=mode, full_state=full, final_files=file_records(self.output_dir, files))
        test_kill_point("final_after_run_state")
        return full


@contextlib.contextmanager
def disk_errors(what: str, folder: str):
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

"""`checkpoint` section: what is saved, how often, where a run resumes. Safe to change on resume."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, key


@dataclass
class CheckpointConfig(Section):
    SECTION = "checkpoint"
    RESUME_SAFE = True
    save_dir: Optional[str] = None  # None -> ./outputs/<model-name>-<algorithm>
    save_actor_every: int = key(0, ge=0)  # 0 = only at the end
    save_full_every: int = key(0, ge=0)
    keep_last: int = key(2, ge=1)
    save_mode: str = key("actor", choices=("actor", "full", "lora"))  # final save
    resume: str = "none"  # none | auto | PATH
    resume_force: bool = False  # resume even if the config changed in ways that change training
    overwrite: bool = False  # a new run where an earlier one is: move that one to previous_run_N/ (else refused)
    # SIGINT/SIGTERM: the longest a stop may take before a forced exit (verl/signals.py)
    stop_grace_s: float = key(20.0, gt=0)

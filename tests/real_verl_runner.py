"""Runs cases through real verl's own code in a second process (tests/real_verl_oracle.py) and
returns its results: the one way the parity tests call the oracle.

Real verl 0.9.1 is installed apart from the project by `scripts/install_cpu.sh --test` (its package
is also named `verl`, so it cannot be imported here); VERL_REAL_VERL_DIR points elsewhere.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REAL_VERL_DIR = Path(os.environ.get("VERL_REAL_VERL_DIR", Path.home() / ".cache/verl/real_verl-0.9.1"))
ORACLE = Path(__file__).with_name("real_verl_oracle.py")


def require_real_verl(*parts: str) -> None:
    """Fail (not skip: the parity tests are the point) when real verl, or a file of it, is missing."""
    needed = REAL_VERL_DIR.joinpath(*parts) if parts else REAL_VERL_DIR / "verl" / "trainer" / "ppo" / "core_algos.py"
    if not needed.exists():
        pytest.fail(f"real verl is not installed at {REAL_VERL_DIR} (no {needed}): run "
                    "`bash scripts/install_cpu.sh --test` (or set VERL_REAL_VERL_DIR)")


def run_real_verl(cases: list, tmp_path: Path, timeout: int = 300) -> list:
    """One result dict per case (see tests/real_verl_oracle.py for the case kinds)."""
    require_real_verl()
    cases_path, results_path = tmp_path / "cases.pt", tmp_path / "results.pt"
    torch.save(cases, cases_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(ORACLE), str(REAL_VERL_DIR), str(cases_path), str(results_path)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(results_path, weights_only=False)

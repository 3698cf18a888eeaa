"""Running one training job with the CLI's guarantees, shared by `verl train` and real verl's
`python3 -m verl.trainer.main_ppo`.

    sys.exit(run_guarded(lambda: run_training("config.yaml", ["training.lr=1e-5"]), debug=False))

run_training loads and checks the config before torch is imported, settles where the run starts,
and trains under the graceful-stop handlers; run_guarded turns what goes wrong into one line and
an exit code (bad input 2, divergence or out of memory 1, a worker or engine process lost 3; tracebacks only
with debug).
"""

from __future__ import annotations

import sys


def _user_errors() -> tuple:
    from verl.errors import ConfigError

    errors = [ConfigError, FileNotFoundError]
    # An error class whose module was never imported cannot have been raised; skipping it keeps
    # a config typo from importing torch just to print one line.
    for module, name in (("verl.data.sources", "DataError"), ("verl.rewards.base", "RewardError"),
                         ("verl.trainer.preflight", "MemoryRefused")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


OOM_HINT = ("out of memory. Knobs, cheapest first: training.micro_batch_size (smaller), "
            "model.enable_gradient_checkpointing: true, training.use_packed_samples: true, "
            "training.max_tokens_per_micro_batch, rollout.gpu_memory_utilization (lower), rollout.max_num_seqs "
            "(lower), training.offload_optimizer: true, model.lora.rank > 0")


def run_training(config_path: str | None, overrides: list[str]) -> int:
    """Load the config, settle where the run starts, train under the graceful-stop handlers.
    The one training path of `verl train` and `python3 -m verl.trainer.main_ppo`; call it inside
    run_guarded for the CLI's exit codes."""
    from verl.config import load_config

    config = load_config(config_path, overrides)  # config errors answer before torch is imported
    from verl.trainer import create_trainer
    from verl.checkpoint.resume import resolve_resume
    from verl.signals import GracefulStop, StopTraining

    point = resolve_resume(config)  # before loading any model: a finished run or a bad resume answers at once
    if point.finished:
        print(point.note)
        return 0
    from verl.trainer.preflight import check_before_loading

    check_before_loading(config)  # CUDA: a config that cannot fit the card is refused before weights load
    with GracefulStop(config.checkpoint.stop_grace_s):  # a stop takes at most stop_grace_s (signals.py)
        try:
            # a stop while models load ends here too (nothing to save)
            trainer = create_trainer(config, resume_point=point)
            metrics = trainer.train()
        except StopTraining as stop:
            print(str(stop))
            return 0
    if metrics:
        print(f"final: reward={metrics['reward']:.4f} kl={metrics['kl']:.4f}; outputs in {trainer.output_dir}")
    return 0


def _lost_worker(exc: BaseException):
    """A worker or engine process that died or stopped answering (verl.distributed): exit 3, its own first line
    (what died: group, call, rank, node, pid, log) and where --resume continues from; None for other errors."""
    module = sys.modules.get("verl.distributed.worker_group")
    if module is None or not isinstance(exc, (module.WorkerDiedError, module.WorkerTimeoutError)):
        return None  # a rank that raised is reported as any error is (exit 1; out of memory with its hint)
    from verl.signals import resume_note

    return f"{one_line(str(exc), limit=600)}; {resume_note()}"


def _is_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return (oom_type is not None and isinstance(exc, oom_type)) or "out of memory" in str(exc).lower()


def _print_error(message) -> None:
    """One line on stderr, with the secrets this process knows hidden (verl/redact.py)."""
    from verl.redact import redact

    print(f"error: {redact(str(message))}", file=sys.stderr)


def run_guarded(fn, debug: bool) -> int:
    """User mistakes -> one line, exit 2; divergence/OOM -> one line, exit 1. `debug` prints the
    traceback before that line; the exit code stays the same (a script checking for 2 works either way)."""
    try:
        return fn()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - turned into one line, traceback with --debug
        if debug:
            import traceback

            traceback.print_exc()
        code, message = _classify(exc, debug)
        _print_error(message)
        return code


def _classify(exc: BaseException, debug: bool = False) -> tuple[int, str]:
    """(exit code, the one line) for an exception that ended a command."""
    if isinstance(exc, _user_errors()):
        return 2, str(exc)
    from verl.checkpoint.manager import CheckpointError
    from verl.trainer.errors import TrainingDiverged
    from verl.trainer.invariants import InvariantBroken

    if isinstance(exc, CheckpointError):  # a missing/corrupted/refused checkpoint: bad input
        return 2, str(exc)
    if isinstance(exc, (TrainingDiverged, InvariantBroken)):
        return 1, str(exc)
    lost = _lost_worker(exc)
    if lost is not None:
        return 3, lost
    if _is_oom(exc):
        return 1, OOM_HINT
    hint = "" if debug else " (run with --debug for the traceback)"
    return 1, f"{type(exc).__name__}: {one_line(str(exc))}{hint}"


def one_line(message: str, limit: int = 400) -> str:
    """A multi-line exception message as one line: its first line, and the second where the first is only a
    heading (pydantic's "1 validation error for ModelConfig", whose reason is on the next line, as vLLM's
    "Model architectures [...] failed to be inspected"), without pydantic's "[type=...]" tail."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    text = lines[0]
    if len(lines) > 1 and (text.endswith(":") or " validation error" in text):
        text = f"{text.rstrip(':')}: {lines[1].split(' [type=')[0]}"
    return text if len(text) <= limit else text[:limit - 3] + "..."

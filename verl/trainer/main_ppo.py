"""Real verl's entry point: `python3 -m verl.trainer.main_ppo key=value ...`.

    python3 -m verl.trainer.main_ppo data.train_files=$HOME/data/gsm8k/train.parquet \\
        data.val_files=$HOME/data/gsm8k/test.parquet data.train_batch_size=256 \\
        actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct actor_rollout_ref.rollout.name=vllm ...

    python3 -m verl.trainer.main_ppo --config-path=my_configs --config-name=my_grpo key=value ...

takes the overrides of real verl's (volcengine/verl 0.9.x) GSM8K quickstart (and the keys of a
Hydra YAML named by --config-path/--config-name, under the overrides), translates them
with the table in `verl.compat.real_verl` (docs/real_verl.md) and trains exactly as
`verl train` does: the same exit codes (bad input: one line, exit 2), SIGINT/SIGTERM finish the
step and save, `--debug` shows tracebacks. Our own keys (model.*, rollout.*, training.*, ...)
may be mixed in. Ignored real keys and derived values are printed, one line each, on stderr,
followed by the equivalent `verl train` command line.
"""

from __future__ import annotations

import shlex
import sys

from verl.trainer.launch import run_guarded, run_training
from verl.trainer.preflight import MemoryRefused


def _main(argv: list[str]) -> int:
    from verl.compat.translate import load_translated, translate

    tr = translate(argv)
    load_translated(tr)  # every check before anything loads; errors name the real key that set the value
    for line in tr.notes:
        print(f"main_ppo: {line}", file=sys.stderr)
    print("main_ppo: running as: verl train " + " ".join(shlex.quote(o) for o in tr.overrides), file=sys.stderr)
    try:
        return run_training(None, tr.overrides)
    except MemoryRefused as exc:
        if not tr.memory_reasons:
            raise
        # the refusal's cause here: e.g. real verl's context parallelism would have split the sequences
        raise MemoryRefused("; ".join(tr.memory_reasons) + f": {exc}") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    return run_guarded(lambda: _main(argv), debug)


if __name__ == "__main__":
    sys.exit(main())

"""verl's short Python API on a tiny local model: runs offline on a CPU in well under a minute.

    python examples/python_api.py            # 4 GRPO steps; --steps N for more

Two reward functions, one in TRL's signature (reading the dataset's `answer` column) and
one in verl's; a `datasets.Dataset` of arithmetic prompts. See docs/python_api.md.
"""

import argparse
import re

from datasets import Dataset

import verl


def correct_answer(completions, answer, **kwargs):
    """TRL style: 1 if the last number in the completion is the answer."""
    found = [re.findall(r"-?\d+", c) for c in completions]
    return [1.0 if f and f[-1] == str(a) else 0.0 for f, a in zip(found, answer)]


def brevity(prompts, responses, samples):
    """verl style: the share of the token budget left unused."""
    return [1.0 - s["response_length"] / s["max_response_length"] for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--save_dir", default="outputs/python-api-example")
    args = parser.parse_args()

    ds = Dataset.from_list([{"prompt": f"What is {a} + {b}? Answer:", "answer": a + b}
                            for a in range(1, 5) for b in range(1, 5)])
    trainer = verl.Trainer(
        model="tiny:gpt2", algorithm="grpo", train_dataset=ds,
        reward_funcs=[correct_answer, brevity], reward_weights=[1.0, 0.1],
        training={"total_steps": args.steps, "batch_size": 4, "micro_batch_size": 4, "lr": 1e-4},
        rollout={"n": 2, "max_new_tokens": 8},
        overrides={"checkpoint.save_dir": args.save_dir, "device": "cpu", "logging.progress_bar": False},
    )
    metrics = trainer.train()
    print(f"reward {metrics['reward/mean']:.3f}  correct_answer {metrics['reward/correct_answer']:.3f}  "
          f"brevity {metrics['reward/brevity']:.3f}; config and metrics in {args.save_dir}")


if __name__ == "__main__":
    main()

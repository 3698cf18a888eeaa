"""A counting task with a verifiable answer, for vision-language RL: "How many squares are in the image?"

Each sample is drawn from its own seed (PIL ImageDraw, no randomness outside `random.Random(seed)`):
`count` filled shapes of one colour on a white background, each inside its own cell of a `grid` x `grid`
layout, so shapes never overlap or touch and the count is unambiguous (a connected-component count of the
dark pixels gives it back; tests/models/test_vl_recipe.py checks that). The answer is the count as a number.

The knobs (CountingTask) and why they are set as they are for a model whose vision tower starts random
(verl/models/hybrid_vl.py): few, large, high-contrast shapes, so that even random patch features separate
"shape" from "background" and the count is a sum over image tokens the language model can learn to read.
    min_count, max_count  the counts drawn, cycled in order (balanced: the text-only prior, always answering
                          the most frequent count, scores 1 / (max - min + 1) on the held-out split)
    image_size            pixels per side (the hybrid's vision tower takes this size: 112 px at patch 14
                          = 8 x 8 = 64 image tokens)
    grid                  cells per side (at most grid**2 shapes)
    shape_size            a shape's side / diameter in pixels (<= cell - 2 * margin); its place in the cell
                          is jittered by the seed
    shape                 "square" or "circle"
Splits: the held-out rows come from seeds "<seed>:val:<i>", the training rows from "<seed>:train:<i>", and
a training image that equals a held-out one (same shapes at the same places) is skipped, so no held-out
image is trained on.

Files (the layout verl.data reads: a jsonl with a chat prompt holding one `<image>` marker and an `images`
column of PNG paths relative to the file, real verl's reward_model.ground_truth):
    python3 -m verl.data.counting_images --out DIR [--train 4096] [--val 256] [--max_count 4] ...
writes DIR/counting_train.jsonl, DIR/counting_val.jsonl, DIR/images/{train,val}_NNNNN.png and
DIR/counting_meta.json (the knobs, the counts per split, the text-only baseline accuracy).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections import Counter
from dataclasses import asdict, dataclass

DESCRIPTION = "counting images (1-4 shapes) with their answers: train + held-out jsonl files and PNGs"
COLOR = (0, 0, 0)  # black on white: the highest contrast on every channel
BACKGROUND = (255, 255, 255)
DATA_SOURCE = "counting"


@dataclass(frozen=True)
class CountingTask:
    min_count: int = 1
    max_count: int = 4
    image_size: int = 112
    grid: int = 4
    shape_size: int = 20
    shape: str = "square"
    margin: int = 2  # pixels between a shape and its cell's edge (two neighbours are >= 2 * margin apart)

    def check(self) -> None:
        """ValueError naming the knob when the task cannot be drawn."""
        cell = self.image_size // self.grid
        if self.shape not in ("square", "circle"):
            raise ValueError(f"shape: '{self.shape}' is not 'square' or 'circle'")
        if not 0 <= self.min_count <= self.max_count <= self.grid ** 2:
            raise ValueError(f"min_count/max_count: need 0 <= {self.min_count} <= {self.max_count} <= grid**2 "
                             f"= {self.grid ** 2}")
        if self.margin < 1 or self.shape_size < 2 or self.shape_size > cell - 2 * self.margin:
            raise ValueError(f"shape_size: {self.shape_size} px does not fit a {cell} px cell with margin "
                             f"{self.margin} (need 2 <= shape_size <= {cell - 2 * self.margin}, margin >= 1)")

    @property
    def question(self) -> str:
        # The range is part of the question: the blind start then answers in range often enough for GRPO's groups
        # to differ (SmolLM2 hybrid, 64 samples at temperature 1: 29 in 1-4 with it, 10 without; "100", "1000" else)
        return (f"How many {self.shape}s are in the image? Answer with a number from {self.min_count} to "
                f"{self.max_count}.")


def draw(task: CountingTask, seed: str, count: int):
    """(PIL RGB image, boxes): `count` shapes in distinct cells, each box (x0, y0, x1, y1) inclusive."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)  # str seeds hash with sha512: the same image on every machine and run
    cell = task.image_size // task.grid
    img = Image.new("RGB", (task.image_size, task.image_size), BACKGROUND)
    pen = ImageDraw.Draw(img)
    boxes = []
    for c in sorted(rng.sample(range(task.grid ** 2), count)):
        x0 = (c % task.grid) * cell + rng.randint(task.margin, cell - task.shape_size - task.margin)
        y0 = (c // task.grid) * cell + rng.randint(task.margin, cell - task.shape_size - task.margin)
        box = (x0, y0, x0 + task.shape_size - 1, y0 + task.shape_size - 1)
        (pen.rectangle if task.shape == "square" else pen.ellipse)(box, fill=COLOR)
        boxes.append(box)
    return img, boxes


def samples(task: CountingTask, split: str, n: int, seed: int = 0, exclude: frozenset = frozenset()):
    """n samples of `split` as (seed string, count, image, boxes); counts cycle min..max (balanced), and
    a sample whose boxes are in `exclude` is redrawn from the next seed."""
    task.check()
    counts = list(range(task.min_count, task.max_count + 1))
    out, k = [], 0
    while len(out) < n:
        s = f"{seed}:{split}:{k}"
        k += 1
        count = counts[len(out) % len(counts)]
        img, boxes = draw(task, s, count)
        if tuple(boxes) in exclude:
            continue
        out.append((s, count, img, boxes))
    return out


def text_only_baseline(counts) -> float:
    """Accuracy of always answering the most frequent count (what a model ignoring the image can reach)."""
    counts = list(counts)
    return max(Counter(counts).values()) / len(counts) if counts else 0.0


def write_splits(out_dir: str, task: CountingTask, n_train: int, n_val: int, seed: int = 0) -> dict:
    """The two jsonl files + PNGs + counting_meta.json under out_dir; returns the meta dict."""
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    val = samples(task, "val", n_val, seed)
    train = samples(task, "train", n_train, seed, exclude=frozenset(tuple(b) for *_, b in val))
    meta = {"task": asdict(task), "question": task.question, "seed": seed}
    for split, rows, name in (("train", train, "counting_train.jsonl"), ("val", val, "counting_val.jsonl")):
        with open(os.path.join(out_dir, name), "w") as fh:
            for i, (s, count, img, boxes) in enumerate(rows):
                rel = f"images/{split}_{i:05d}.png"
                img.save(os.path.join(out_dir, rel), optimize=True)
                fh.write(json.dumps({"data_source": DATA_SOURCE,
                                     "prompt": [{"role": "user", "content": "<image>" + task.question}],
                                     "images": [rel], "reward_model": {"style": "rule", "ground_truth": str(count)},
                                     "extra_info": {"seed": s, "count": count, "boxes": boxes}}) + "\n")
        meta[split] = {"file": name, "rows": len(rows), "counts": dict(sorted(Counter(c for _, c, _, _ in rows).items())),
                       "text_only_baseline_acc": round(text_only_baseline(c for _, c, _, _ in rows), 4)}
    with open(os.path.join(out_dir, "counting_meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    return meta


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = CountingTask()
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--train", type=int, default=4096, help="training rows")
    parser.add_argument("--val", type=int, default=256, help="held-out rows")
    parser.add_argument("--seed", type=int, default=0)
    for name in ("min_count", "max_count", "image_size", "grid", "shape_size", "margin"):
        parser.add_argument(f"--{name}", type=int, default=getattr(d, name))
    parser.add_argument("--shape", default=d.shape, help="square | circle")


def run(args: argparse.Namespace) -> int:
    task = CountingTask(**{k: getattr(args, k) for k in asdict(CountingTask())})
    try:
        task.check()
        if args.train < 1 or args.val < 1:
            raise ValueError("--train/--val: need at least one row each")
    except ValueError as exc:
        print(f"counting_images: {exc}", file=sys.stderr)
        return 2
    meta = write_splits(args.out, task, args.train, args.val, args.seed)
    print(json.dumps({k: meta[k] for k in ("train", "val")}))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m verl.data.counting_images", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""Train a reward model on preference pairs (Bradley-Terry): `verl train-rm`.

    loss = -log sigmoid(r(prompt, chosen) - r(prompt, rejected))

`r` is AutoModelForSequenceClassification with one label, loaded from any causal-LM or
encoder checkpoint (the score head starts random). Texts are rendered exactly as the
`huggingface_rm` reward renders them at training time (verl.rewards.hf_rm), so the
saved folder plugs straight into `reward_fn: {type: huggingface_rm, model_name: DIR}`.

Pairs are jsonl lines {"prompt": str, "chosen": str, "rejected": str}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Optional

import torch
import torch.nn.functional as F

from verl.rewards.hf_rm import encode_for_rm, load_rm_tokenizer, render_for_rm, rm_scores


def load_pairs(path: str) -> list[dict]:
    """Read preference pairs from jsonl; every line needs prompt, chosen and rejected."""
    pairs = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            missing = [k for k in ("prompt", "chosen", "rejected") if not isinstance(row.get(k), str)]
            if missing:
                raise ValueError(f"{path}:{lineno}: missing or non-string key(s) {', '.join(missing)}")
            pairs.append({"prompt": row["prompt"], "chosen": row["chosen"], "rejected": row["rejected"]})
    if not pairs:
        raise ValueError(f"{path}: no preference pairs found")
    return pairs


def _pair_rewards(model, tokenizer, pairs, max_length, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(r_chosen, r_rejected), each (b,), from one forward pass over the 2b texts."""
    texts, templated = [], False
    for key in ("chosen", "rejected"):
        for p in pairs:
            text, templated = render_for_rm(tokenizer, p["prompt"], p[key])
            texts.append(text)
    enc = encode_for_rm(tokenizer, texts, templated, max_length)
    r = rm_scores(model(**{k: v.to(device) for k, v in enc.items()}).logits).float()
    return r[: len(pairs)], r[len(pairs):]


@torch.no_grad()
def pair_accuracy(model, tokenizer, pairs, max_length=512, batch_size=16, device="cpu") -> float:
    """Fraction of pairs with r(chosen) > r(rejected)."""
    if not pairs:
        return float("nan")
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(pairs), batch_size):
        rc, rr = _pair_rewards(model, tokenizer, pairs[i:i + batch_size], max_length, device)
        correct += (rc > rr).sum().item()
    model.train(was_training)
    return correct / len(pairs)


def train_reward_model(model_name_or_path: str, train_pairs: list, val_pairs: Optional[list], out_dir: str,
                       epochs: int = 1, lr: float = 1e-5, batch_size: int = 8, max_length: int = 512,
                       seed: int = 0, device: str = "cpu", weight_decay: float = 0.0,
                       log_every: int = 0) -> dict:
    """Fit a scalar reward head (and the trunk) with the Bradley-Terry loss; save to out_dir.

    Returns metrics: train_loss (mean over the last epoch), train_accuracy (last epoch),
    val_accuracy_before / val_accuracy_after (NaN without val pairs), steps, seconds.
    """
    from transformers import AutoModelForSequenceClassification

    from verl.models.loading import model_path

    if not train_pairs:
        raise ValueError("train_reward_model: train_pairs is empty")
    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise ValueError(f"train_reward_model: need epochs >= 1, batch_size >= 1, lr > 0 "
                         f"(got {epochs}, {batch_size}, {lr})")
    start = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    name = model_path(model_name_or_path, "--model")  # a hub name without a hub fails in seconds
    tokenizer = load_rm_tokenizer(name)
    model = AutoModelForSequenceClassification.from_pretrained(name, num_labels=1)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.to(device)
    val_pairs = list(val_pairs or [])
    metrics = {"val_accuracy_before": pair_accuracy(model, tokenizer, val_pairs, max_length, batch_size, device)}

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    order = list(range(len(train_pairs)))
    rng = random.Random(seed)
    model.train()
    step = 0
    for epoch in range(epochs):
        rng.shuffle(order)
        losses, correct = [], 0
        for i in range(0, len(order), batch_size):
            batch = [train_pairs[j] for j in order[i:i + batch_size]]
            rc, rr = _pair_rewards(model, tokenizer, batch, max_length, device)
            loss = -F.logsigmoid(rc - rr).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            correct += (rc > rr).sum().item()
            step += 1
            if log_every and step % log_every == 0:
                print(f"[train-rm] epoch {epoch + 1} step {step} loss {loss.item():.4f}", flush=True)
        metrics["train_loss"] = sum(losses) / len(losses)
        metrics["train_accuracy"] = correct / len(order)
    metrics["val_accuracy_after"] = pair_accuracy(model, tokenizer, val_pairs, max_length, batch_size, device)
    metrics["steps"] = step
    model.eval()
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    metrics["seconds"] = time.time() - start
    with open(os.path.join(out_dir, "train_rm_metrics.json"), "w") as fh:
        json.dump(metrics, fh, indent=2)
    return metrics


DESCRIPTION = ("Train a reward model on preference pairs (jsonl lines {prompt, chosen, rejected}) with the "
               "Bradley-Terry loss.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(p, "--model", required=True, help="hub name, local folder or tiny:<arch> to start from")
    add_flag(p, "--train", required=True, help="training pairs (.jsonl)")
    add_flag(p, "--val", default=None, help="held-out pairs (.jsonl) for accuracy before/after")
    add_flag(p, "--out", required=True, help="output folder (loadable by reward_fn.type huggingface_rm)")
    add_flag(p, "--epochs", type=int, default=1, help="passes over the pairs (default 1)")
    add_flag(p, "--lr", type=float, default=1e-5, help="learning rate (default 1e-5)")
    add_flag(p, "--batch_size", type=int, default=8, help="pairs per optimizer step (default 8)")
    add_flag(p, "--max_length", type=int, default=512, help="tokens per rendered text (default 512)")
    add_flag(p, "--seed", type=int, default=0, help="random seed (default 0)")
    add_flag(p, "--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    add_flag(p, "--log_every", type=int, default=10, help="print the loss every N steps (0 = never)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verl train-rm", description=DESCRIPTION)
    add_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    try:
        train = load_pairs(args.train)
        val = load_pairs(args.val) if args.val else None
    except (OSError, ValueError) as exc:
        print(f"verl train-rm: error: {exc}", file=sys.stderr)
        return 2
    metrics = train_reward_model(args.model, train, val, args.out, epochs=args.epochs, lr=args.lr,
                                 batch_size=args.batch_size, max_length=args.max_length, seed=args.seed,
                                 device=args.device, log_every=args.log_every)
    print(json.dumps(metrics, indent=2))
    print(f"saved reward model to {args.out}")
    return 0


def main(argv: Optional[list] = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

"""A pruned student for the on-policy distillation demo: the teacher's first K decoder layers (its
embeddings, norms and LM head too) in a model of the teacher's architecture with K layers, saved with the
teacher's tokenizer. Distilling it back towards the teacher is the pruned-then-distilled recipe; its KL to
the teacher starts well above zero (the missing layers) and falls as it learns.

    python benchmarks/distill_student.py --teacher FOLDER --layers 15 --out /tmp/student
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


def pruned_student(teacher: str, layers: int, out: str) -> str:
    config = AutoConfig.from_pretrained(teacher)
    if not 1 <= layers < config.num_hidden_layers:
        raise SystemExit(f"--layers: 1 .. {config.num_hidden_layers - 1} (the teacher has {config.num_hidden_layers})")
    big = AutoModelForCausalLM.from_pretrained(teacher, dtype=torch.bfloat16)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):  # per-layer attention kinds (Qwen2 and others): the first K
        config.layer_types = list(config.layer_types)[:layers]
    small = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    kept = {k: v for k, v in big.state_dict().items()
            if ".layers." not in k or int(k.split(".layers.")[1].split(".")[0]) < layers}
    missing, unexpected = small.load_state_dict(kept, strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:  # a tied LM head is the embeddings
        raise SystemExit(f"the student did not take the teacher's weights: missing {missing}, unexpected {unexpected}")
    small.save_pretrained(out)
    AutoTokenizer.from_pretrained(teacher).save_pretrained(out)
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    print(pruned_student(a.teacher, a.layers, a.out))

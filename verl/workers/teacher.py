"""The distillation teacher: a frozen causal LM of its own (any size, the student's tokenizer) that
scores the student's sampled tokens, log p(y_t) (B, R), once per step (distillation.*).

    teacher = Teacher.from_config(config, device, tokenizer)
    batch.teacher_log_probs = teacher.compute_log_probs(batch)

It runs like the reference policy (same micro-batching, packing, memory budget and temperature) on a
model loaded from `distillation.teacher` in `distillation.teacher_dtype` (model.dtype by default), and
with `distillation.offload_teacher` waits in host memory between its passes.
"""

from __future__ import annotations

import dataclasses

import torch

from verl.errors import ConfigError
from verl.models.loading import load_causal_lm, load_tokenizer, torch_dtype
from verl.workers.micro_batches import MicroBatching
from verl.workers.reference import Reference


class Teacher(Reference):
    ROLE = "teacher"

    @classmethod
    def from_config(cls, config, device: torch.device, tokenizer, **kwargs) -> "Teacher":
        d = config.distillation
        dtype_name = d.teacher_dtype or config.model.dtype
        check_same_tokenizer(tokenizer, d.teacher, d.trust_remote_code)
        model_cfg = dataclasses.replace(config.model, trust_remote_code=d.trust_remote_code, gguf_file=None,
                                        override_config={})
        model = load_causal_lm(model_cfg, torch_dtype(dtype_name), key="distillation.teacher", name=d.teacher,
                               device_type=device.type)
        model.requires_grad_(False)
        model.eval()
        home = torch.device("cpu") if d.offload_teacher else device
        return cls(config.model, config.training, device, model.to(home), MicroBatching.from_training(config.training),
                   temperature=config.rollout.temperature or 1.0, frozen=True, offload=d.offload_teacher,
                   compute_dtype=torch_dtype(dtype_name), **kwargs)


def check_same_tokenizer(student_tokenizer, teacher: str, trust_remote_code: bool) -> None:
    """The teacher must read the student's token ids as the same text: same vocabulary, id for id."""
    theirs = load_tokenizer(teacher, "distillation.teacher", trust_remote_code)
    if theirs.get_vocab() != student_tokenizer.get_vocab():
        mine, other = len(student_tokenizer), len(theirs)
        raise ConfigError(f"distillation.teacher: '{teacher}' has another tokenizer than the student ({other} tokens "
                          f"vs {mine}, or the same tokens under other ids); the teacher scores the student's token "
                          "ids, so both need one tokenizer")

"""Validation on held-out prompts and the seed's fixed baseline prompt (S16).

Metrics, per data source `src` (and `all`):
    val/<src>/mean@1   mean reward of the greedy answer
    val/<src>/acc@1    fraction of greedy answers scoring >= 1 (correct, for verifiable rewards)
    val/<src>/mean@n   mean reward over data.val_n sampled answers per prompt (when val_n > 1)
    val/<src>/pass@n   fraction of prompts with at least one sampled answer scoring >= 1
    val/<src>/mean@1_sampled, pass@1_sampled   the same for one sampled answer (data.val_do_sample, val_n = 1)
The sampled answers use data.val_temperature / val_top_p / val_top_k where set, else the rollout's.

A stop request (SIGINT/SIGTERM) is noticed between batches (and inside a reward call): the pass
is abandoned with `Interrupted` (verl/signals.py); validation has no state to save.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from verl.batch import Batch
from verl.data.prompts import PromptLoader, render_prompt, uses_chat_template
from verl.rollout.base import SamplingParams
from verl.signals import abandon_if_stopped, phase
from verl.tracking.heartbeat import Heartbeat

CORRECT = 1.0 - 1e-6  # a score at the top of the verifiable scale counts as correct


class Validator:
    heartbeat_s = 10.0  # a progress line this often while a validation pass runs (CPU passes take minutes)

    def __init__(self, engine, reward, tokenizer, config, val_rows, tool_schemas, *, say):
        """engine: the rollout engine as the trainer's thread calls it (behind the producer's lock in
        asynchronous mode); reward: the RewardManager; val_rows: the held-out rows (none: disabled);
        tool_schemas: the chat template's tools; say(line): a console line."""
        self.engine, self.reward, self.tokenizer, self.config = engine, reward, tokenizer, config
        self.val_rows, self.tool_schemas = val_rows, tool_schemas
        self.say = say
        cfg = config
        self.loader = None
        if val_rows:
            self.loader = PromptLoader(val_rows, tokenizer, cfg.data,
                                       batch_size=max(cfg.training.batch_size * cfg.rollout.n, 8), seed=cfg.seed, shuffle=False,
                                       tools=tool_schemas, default_agent=cfg.rollout.multi_turn.default_agent,
                                       name="validation")

    @property
    def enabled(self) -> bool:
        return self.loader is not None

    def _sampling(self, greedy: bool, n: int) -> SamplingParams:
        s = SamplingParams.from_config(self.config.rollout)
        s.greedy, s.n = greedy, n
        s.log_probs = False  # nothing reads them here: vLLM skips computing them
        data = self.config.data
        for name in ("temperature", "top_p", "top_k"):  # the sampled pass's own settings (real verl's val_kwargs)
            if getattr(data, f"val_{name}") is not None:
                setattr(s, name, getattr(data, f"val_{name}"))
        return s

    @torch.no_grad()
    def run(self, step: int, num_samples_logged: int | None = None) -> tuple[dict, list[dict]]:
        """Generate on the whole held-out set; returns the val/* metrics and the first
        `logging.val_samples` (prompt, greedy answer, reward) rows, for the sample log."""
        cfg = self.config
        if num_samples_logged is None:
            num_samples_logged = cfg.logging.val_samples
        scores = defaultdict(lambda: defaultdict(list))  # src -> metric -> values
        logged = []
        where = "the validation before step 1" if step == 0 else f"the validation after step {step}"
        if step == 0:  # before any step line: say what the first (possibly long) silent phase is
            n_rows = len(self.val_rows)
            self.say(f"validating on {n_rows} held-out prompt{'s' if n_rows != 1 else ''} (greedy) before "
                     f"step 1; again every training.val_every={cfg.training.val_every} steps")
        done = [0]  # prompts answered so far, read by the heartbeat's thread
        total = len(self.loader.rows)
        with Heartbeat(self.say, lambda: f"{done[0]}/{total} held-out prompts answered", "validating",
                       every_s=self.heartbeat_s):
            for prompts in self.loader.one_pass():
                abandon_if_stopped(where)
                with phase(where):
                    self._score_batch(prompts, scores, logged, num_samples_logged)
                done[0] += len(prompts)
        metrics = {f"val/{src}/{name}": sum(v) / len(v) for src, d in scores.items() for name, v in d.items()}
        return metrics, logged

    def _score_batch(self, prompts: Batch, scores, logged: list, num_samples_logged: int) -> None:
        """Greedy (and with data.val_n > 1 sampled) answers to one batch of prompts, into `scores`."""
        n = self.config.data.val_n
        greedy = self.engine.generate(prompts, self._sampling(True, 1))
        g_scores, _ = self.reward.score(greedy)
        for i, src in enumerate(greedy.data_source):
            for key in (src, "all"):
                scores[key]["mean@1"].append(float(g_scores[i]))
                scores[key]["acc@1"].append(float(g_scores[i] >= CORRECT))
        if len(logged) < num_samples_logged:
            logged += [{"prompt": greedy.prompt_text[i], "response": greedy.response_text[i],
                        "ground_truth": greedy.ground_truth[i], "reward": float(g_scores[i]), "kind": "val"}
                       for i in range(min(len(greedy), num_samples_logged - len(logged)))]
        if n > 1 or self.config.data.val_do_sample:
            sampled = self.engine.generate(prompts, self._sampling(False, n))
            s_scores, _ = self.reward.score(sampled)
            per_prompt = s_scores.view(-1, n)
            tag = "" if n > 1 else "_sampled"  # mean@1 is the greedy answer's
            for j, src in enumerate(prompts.data_source):
                for key in (src, "all"):
                    scores[key][f"mean@{n}{tag}"].append(float(per_prompt[j].mean()))
                    scores[key][f"pass@{n}{tag}"].append(float((per_prompt[j] >= CORRECT).any()))

    @torch.no_grad()
    def baseline_answer(self) -> str | None:
        """Greedy answer to `data.baseline_prompt` (the seed's fixed before/after comparison)."""
        data = self.config.data
        prompt = data.baseline_prompt
        if not prompt:
            return None
        text = render_prompt(prompt, self.tokenizer, data, self.tool_schemas)
        ids = self.tokenizer(text, add_special_tokens=not uses_chat_template(self.tokenizer, data))["input_ids"]
        batch = Batch(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                      prompt_text=[text], group_id=[0])
        out = self.engine.generate(batch, self._sampling(True, 1))
        return out.response_text[0]

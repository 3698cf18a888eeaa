"""Why is TRL's colocated generation 2-4x slower than raw vLLM?

Run inside the trl-vllm worker of benchmarks/e2e_grpo.py (`--trl-gen-probe REPEATS`): in the same process as
TRL's colocated engine, after its timed steps, the probe

  1. has recorded, on every step, the seconds of TRL's own generation call (VLLMGeneration.generate: its
     prompt handling, the engine call, reading log-probs back) and of the engine call inside it
     (`self.llm.generate(vllm_prompts, sampling_params=..., use_tqdm=False)`, vllm_generation.py colocate branch);
  2. replays that exact engine call REPEATS times on the same LLM with the same prompts and the same
     SamplingParams object TRL built (n=1 per duplicated prompt, temperature/top_p/top_k/min_p/
     repetition_penalty, max_tokens, logprobs=0, plus generation_kwargs: ignore_eos);
  3. replays four variants, one change each: logprobs=None (no per-token log-probs), flat_logprobs=True (the
     same log-probs returned as flat lists, as verl's rollout asks for them, instead of one dict and Logprob
     object per token), n=group over the unique prompts (one request per prompt, as verl's rollout sends them),
     and detokenize flipped from the recorded call's: off (the log-probs kept, no text decoded: as verl's
     rollout asks) after TRL's defaults call, on (vLLM's default) after its like-for-like call, which has it off;
  4. records the engine's settings TRL chose (max_num_seqs, max_num_batched_tokens=4096, logprobs_mode
     processed_logprobs, gpu_memory_utilization, enforce_eager / CUDA graphs).

Reading: TRL call >> engine call: the time is TRL's around the engine; engine call ~ replay but >> verl's engine
call (benchmarks/rollout.py) on the same requests: the engine's settings (compare item 4 with verl's); replay >>
a variant: that one parameter. Functions here take the engine as an argument and import no vLLM, so that
tests/benchmarks/test_bench_e2e_work.py checks them with a stand-in engine on a CPU. Checked by hand on 2026-12-03 against a
real engine (vLLM 0.32 on the CPU, TRL's LLM settings, tiny-llama): the recorder sees TRL-style calls, the clones
leave TRL's SamplingParams untouched, the n=group variant returns group full-length completions per unique prompt,
the logprobs=None variant none, and engine_settings reads max_num_seqs / max_num_batched_tokens / logprobs_mode.
The whole trl-vllm worker could not run on this CPU: TRL 1.16's sync_weights fails on vLLM 0.32's loaders
('Parameter' object has no attribute 'weight_loader'); the H200 has vLLM 0.26, where TRL ran on 2026-12-02.
"""

from __future__ import annotations

import copy
import statistics
import time


class EngineCallRecorder:
    """Wraps `llm.generate` in place: keeps the first call's arguments and every call's seconds."""

    def __init__(self, llm, sync=lambda: None):
        self.llm, self.sync, self.calls, self.seconds = llm, sync, None, []
        self._generate = llm.generate

        def generate(*a, **kw):
            if self.calls is None:
                self.calls = (a, dict(kw))
            self.sync()
            t0 = time.perf_counter()
            out = self._generate(*a, **kw)
            self.sync()
            self.seconds.append(time.perf_counter() - t0)
            return out

        llm.generate = generate

    def restore(self):
        self.llm.generate = self._generate


def _prompts_and_params(calls):
    a, kw = calls
    prompts = kw.get("prompts", a[0] if a else None)
    params = kw.get("sampling_params", a[1] if len(a) > 1 else None)
    return prompts, params


def _clone(params, **changes):
    out = params.clone() if hasattr(params, "clone") else copy.deepcopy(params)
    for k, v in changes.items():
        setattr(out, k, v)
    return out


def unique_prompts(prompts: list, group: int) -> list:
    """TRL's colocate call repeats each prompt `group` times in a row (one request each): the first of each run."""
    if len(prompts) % group:
        raise ValueError(f"{len(prompts)} prompts are not whole groups of {group}")
    return prompts[::group]


def replay(recorder: EngineCallRecorder, group: int, repeats: int, sync=lambda: None) -> dict:
    """Seconds (median over `repeats`) of the recorded engine call replayed as TRL made it, and of its variants."""
    if recorder.calls is None:
        raise RuntimeError("trl generation probe: TRL made no engine call to replay")
    prompts, params = _prompts_and_params(recorder.calls)
    engine = recorder._generate  # the unwrapped call: the replays are not counted as TRL's calls
    variants = {
        "replay_same_params": (prompts, params),
        "replay_no_logprobs": (prompts, _clone(params, logprobs=None)),
        # On the H200 at work (b), 2026-12-03: same params 8.45 s, no log-probs 3.78 s, while verl's engine call
        # with log-probs took 5.20 s: is the difference the per-token Logprob objects (flat_logprobs)? No: on
        # 2026-12-04, 11.68 s with flat lists against 11.82 s without.
        "replay_flat_logprobs": (prompts, _clone(params, flat_logprobs=True)),
        "replay_n_group": (unique_prompts(prompts, group), _clone(params, n=group)),
    }
    # detokenize flipped from the recorded call's (one replay, not one that repeats "same params"). verl sends
    # detokenize=False (its text comes from the token ids). With a tokenizer, vLLM 0.26's
    # LogprobsProcessor._update_sample_logprobs decodes every log-prob token (convert_ids_list_to_tokens) and
    # _verify_tokens re-decodes with up to 4 context tokens each one whose text ends in U+FFFD (frequent for random
    # weights' byte tokens): Python work per generated token. TRL's defaults call has it on (vLLM's default): the
    # replay turns it off; its like-for-like call has it off (2026-12-04: TRL's generation 5.90 s a step at (b),
    # 12.5-13.2 s on the two earlier machine starts with it on): the replay turns it on, the A/B of one machine.
    if getattr(params, "detokenize", True):
        variants["replay_no_detokenize"] = (prompts, _clone(params, detokenize=False))
    else:
        variants["replay_detokenize_on"] = (prompts, _clone(params, detokenize=True))
    out = {}
    for name, (ps, sp) in variants.items():
        times = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            engine(ps, sampling_params=sp, use_tqdm=False)
            sync()
            times.append(time.perf_counter() - t0)
        out[name + "_s"] = round(statistics.median(times), 4)
    out["requests"] = len(prompts)
    out["sampling_params"] = repr(params)
    return out


def engine_settings(llm) -> dict:
    """The engine settings TRL chose, read from vLLM's config objects where they exist (None where not)."""
    cfg = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)

    def pick(section, name):
        return getattr(getattr(cfg, section, None), name, None)

    return dict(max_num_seqs=pick("scheduler_config", "max_num_seqs"),
                max_num_batched_tokens=pick("scheduler_config", "max_num_batched_tokens"),
                logprobs_mode=str(pick("model_config", "logprobs_mode")),
                enforce_eager=pick("model_config", "enforce_eager"),
                gpu_memory_utilization=pick("cache_config", "gpu_memory_utilization"))


def summary(trl_call_s: list[float], recorder: EngineCallRecorder, replays: dict, settings: dict,
            warmup: int) -> dict:
    """The probe's row fields: TRL's call and its engine call (medians over the timed steps), the replays."""
    timed_trl, timed_engine = trl_call_s[warmup:], recorder.seconds[warmup:]
    if not timed_trl or not timed_engine:
        raise RuntimeError(f"trl generation probe: {len(trl_call_s)} TRL calls, {len(recorder.seconds)} engine calls, "
                           f"{warmup} warm-up")
    trl_s, engine_s = statistics.median(timed_trl), statistics.median(timed_engine)
    return dict(trl_generate_s=round(trl_s, 4), trl_engine_call_s=round(engine_s, 4),
                around_engine_s=round(trl_s - engine_s, 4), **replays, engine_settings=settings)

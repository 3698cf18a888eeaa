"""Real verl's reward keys -> our `reward_fn` section: rows of `verl.compat.real_verl.TABLE`.

Real verl has two spellings of the same settings; both are read, and giving both with different
values is refused (one line naming both):

    older (<= 0.8)                           current (0.9: the `reward` section)
    custom_reward_function.path / .name      reward.custom_reward_function.path / .name
    custom_reward_function.reward_kwargs     reward.custom_reward_function.reward_kwargs
    reward_model.reward_manager              reward.reward_manager.name
    reward_model.reward_kwargs               reward.reward_kwargs
    reward_model.enable, reward_model.model.path    reward.reward_model.enable, .model_path

* A custom reward (`path` + `name`, default `compute_score`) becomes `reward_fn.type=python` with
  `reward_fn.function=PATH:NAME`; its call form (per sample or batched) is read from its parameters
  (verl.rewards.compute_score), so the naive and batch managers both work; `reward_kwargs` go to it.
* The `dapo` manager is the per-sample call plus the overlong penalty
  (`reward_kwargs.overlong_buffer_cfg.*` -> `algorithm.overlong_penalty.*`).
* The `gdpo` manager (real verl's reward loop, experimental/reward_loop/reward_manager/gdpo.py) makes the naive
  manager's call and reads its result as the naive manager does: it is the naive manager here. Its one
  difference, extra_info['experiment_name'] set for the function, is not passed (a note says so).
* The `prime` manager (workers/reward_manager/prime.py) makes the same per-sample call in a process pool, and a
  call that raises or times out scores 0 instead of stopping the run: the naive call with
  `reward_fn.on_error=zero`. Numbers score as the naive manager scores them.
* A reward model (`enable=True`) is `reward_fn.type=huggingface_rm` on `model.path`, run in this
  process; real verl's serving settings (its `rollout.*`, resource pool) are ignored.
"""

from __future__ import annotations

import os

from verl.compat.real_keys import MANUAL, as_bool, as_int, ignored, only, reads, refuse
from verl.errors import ConfigError

OLD_FN, NEW_FN = "custom_reward_function", "reward.custom_reward_function"
MANAGERS = ("naive", "batch", "dapo", "gdpo", "prime")
# managers that score as naive does (the per-sample call, its result read alike): what each adds
AS_NAIVE = {
    "gdpo": ("real verl's gdpo reward manager scores as its naive manager (the same compute_score call and "
             "result); the extra_info['experiment_name'] it adds for the function is not passed here"),
    "prime": ("real verl's prime reward manager scores as its naive manager, in a process pool, and a call that "
              "raises or times out scores 0: reward_fn.on_error=zero here (the time limit is reward_fn.timeout_s, "
              "300 s a batch call; real verl's is 300 s a sample); a dict result is read as naive reads it (its "
              "'score'), where real verl's prime manager scores such a batch 0"),
}


def _one_of(ctx, old: str, new: str):
    """(key, value) of whichever spelling is given (new wins over a default, the command line over a
    config file); two given on the same footing that differ are refused."""
    typed = getattr(ctx, "command_line", set())
    if (old in typed) != (new in typed):
        return (old, ctx.get(old)) if old in typed else (new, ctx.get(new))
    if ctx.given(old) and ctx.given(new) and ctx.get(old) != ctx.get(new):
        raise ConfigError(f"{old}={ctx.get(old)!r} and {new}={ctx.get(new)!r} differ: they are the same "
                          f"setting (older and current spelling); keep one")
    return (new, ctx.get(new)) if ctx.given(new) or not ctx.given(old) else (old, ctx.get(old))


def _custom_reward(prefix: str):
    def convert(value, ctx, key):
        if value is None:
            return {}
        path = os.path.abspath(os.path.expanduser(str(value)))
        if not os.path.isfile(path):
            raise ConfigError(f"{key}: file '{value}' not found (looked at {path})")
        name = ctx.get(f"{prefix}.name") or "compute_score"
        kwargs = dict(ctx.get(f"{prefix}.reward_kwargs") or {})
        if _manager(ctx)[1] == "batch":  # real verl's batch manager passes its own reward_kwargs to the function too
            kwargs.update(_manager_kwargs(ctx)[1] or {})
        out = {"reward_fn.type": "python", "reward_fn.function": f"{path}:{name}"}
        if kwargs:
            out["reward_fn.kwargs"] = kwargs
        return out

    return convert


def _manager(ctx):
    return _one_of(ctx, "reward_model.reward_manager", "reward.reward_manager.name")


def _manager_kwargs(ctx):
    return _one_of(ctx, "reward_model.reward_kwargs", "reward.reward_kwargs")


def _reward_manager(value, ctx, key):
    """naive / batch: the call form is the function's (its parameters); dapo: plus the overlong penalty."""
    if value is None or _manager(ctx)[0] != key:
        return {}  # the other spelling is the one in force (given, or typed over a config file's)
    if value not in MANAGERS:
        raise refuse(key, value, f"its '{value}' reward manager has no equivalent here (supported: "
                                 f"{', '.join(MANAGERS)}); score with custom_reward_function.path=FILE.py instead")
    kw_key, kwargs = _manager_kwargs(ctx)
    kwargs = dict(kwargs or {})
    if value != "dapo":
        if kwargs and value in ("naive", *AS_NAIVE):
            raise ConfigError(f"{kw_key}: real verl's {value} reward manager takes no reward_kwargs (got "
                              f"{', '.join(kwargs)}); pass a function's arguments as "
                              f"custom_reward_function.reward_kwargs (see {MANUAL})")
        if value in AS_NAIVE:
            ctx.notes.append(f"{key}={value}: {AS_NAIVE[value]}")
        return {"reward_fn.on_error": "zero"} if value == "prime" else {}
    return _dapo_overlong(kwargs, kw_key, ctx)


def _dapo_overlong(kwargs: dict, kw_key: str, ctx) -> dict:
    """Real verl's DAPO manager: reward - min(exceed / buffer_len * factor, 0) past max_resp_len - buffer_len."""
    unknown = set(kwargs) - {"overlong_buffer_cfg", "max_resp_len"}
    if unknown:
        raise ConfigError(f"{kw_key}.{sorted(unknown)[0]}: real verl's dapo reward manager has no such argument")
    buf = dict(kwargs.get("overlong_buffer_cfg") or {})
    if not as_bool(buf.get("enable", False), f"{kw_key}.overlong_buffer_cfg.enable"):
        return {}
    max_len = kwargs.get("max_resp_len")
    response = ctx.get("data.max_response_length")
    if max_len is not None and (as_int(max_len, f"{kw_key}.max_resp_len")
                                != as_int(response, "data.max_response_length")):
        raise ConfigError(f"{kw_key}.max_resp_len={max_len} differs from data.max_response_length={response}: the "
                          f"overlong penalty here counts from the response limit (see {MANUAL})")
    buffer_len = as_int(buf.get("len", 8), f"{kw_key}.overlong_buffer_cfg.len", low=1)
    if buffer_len > as_int(response, "data.max_response_length"):
        raise ConfigError(f"{kw_key}.overlong_buffer_cfg.len={buffer_len} is longer than data.max_response_length="
                          f"{response}: the penalty ramps over the last len tokens of a response")
    return {"algorithm.overlong_penalty.enable": True,
            "algorithm.overlong_penalty.buffer_len": buffer_len,
            "algorithm.overlong_penalty.penalty_factor": float(buf.get("penalty_factor", 1.0))}


def _reward_model(path_key: str):
    def convert(value, ctx, key):
        if value is None or not as_bool(value, key):
            return {}
        path = ctx.get(path_key)
        if not path:
            raise ConfigError(f"{key}=True needs {path_key} (the reward model's folder or hub name)")
        out = {"reward_fn.type": "huggingface_rm", "reward_fn.model_name": os.path.expanduser(str(path))}
        if ctx.get("trainer.device") == "cuda":
            out["reward_fn.device"] = "cuda"
        return out

    return convert


def _rm_micro(value, ctx, key):
    return {} if value is None else {"reward_fn.rm_batch_size": as_int(value, key, low=1)}


def _rm_max_length(value, ctx, key):
    return {} if value is None else {"reward_fn.max_length": as_int(value, key, low=1)}


def _custom_fn(prefix: str) -> list:
    return [
        (f"{prefix}.path", dict(convert=_custom_reward(prefix), target="reward_fn.function = path:name",
                                note="real verl's compute_score(data_source, solution_str, ground_truth, "
                                     "extra_info), per sample or batched; reward_fn.type=python")),
        (f"{prefix}.name", reads("custom_reward_function.path", default="compute_score")),
        (f"{prefix}.reward_kwargs", dict(reads("custom_reward_function.path: the function's extra arguments"),
                                         dict_value=True)),
    ]


_SERVING = "the reward model runs in this process here (Hugging Face); real verl's serving settings do not apply"
# A code data source's reward (codecontests, apps, codeforces, taco) runs the program in verl's own sandbox
# (verl/rewards/real_verl_scores/code.py), by the rule real verl applies without a sandbox URL
_SANDBOX_FUSION = ("code-execution rewards run in verl's local sandbox, by the rule real verl applies without a "
                   "sandbox URL (prime_code's), not at this URL")

ENTRIES: list = [
    *_custom_fn(OLD_FN),
    *_custom_fn(NEW_FN),
    ("reward_model.enable", dict(convert=_reward_model("reward_model.model.path"),
                                 target="reward_fn.type = huggingface_rm",
                                 note="a sequence-scoring model on reward_model.model.path")),
    ("reward_model.model.path", reads("reward_model.enable")),
    ("reward_model.model.input_tokenizer", ignored("the reward model re-reads the text with its own tokenizer")),
    ("reward_model.model.external_lib", only(None, why="importing extra model code")),
    ("reward_model.model.trust_remote_code", only(False, None, why="remote code in the reward model")),
    ("reward_model.model.*", ignored("FSDP engine settings of the reward model")),
    ("reward_model.micro_batch_size_per_gpu", dict(convert=_rm_micro, target="reward_fn.rm_batch_size")),
    ("reward_model.micro_batch_size", dict(convert=_rm_micro, target="reward_fn.rm_batch_size")),
    ("reward_model.max_length", dict(convert=_rm_max_length, target="reward_fn.max_length")),
    ("reward_model.reward_manager", dict(convert=_reward_manager, target="(checked) / reward_fn.on_error",
                                         note="naive, batch (the function's parameters pick the call), dapo "
                                              "(+ algorithm.overlong_penalty), gdpo (= naive), prime (= naive "
                                              "with reward_fn.on_error=zero); others are refused")),
    ("reward_model.reward_kwargs", dict(reads("reward_model.reward_manager"), dict_value=True)),
    ("reward_model.sandbox_fusion.url", ignored(_SANDBOX_FUSION)),
    ("reward_model.sandbox_fusion.*", ignored("used with sandbox_fusion.url only")),
    ("reward_model.*", ignored(_SERVING)),
    ("reward.reward_manager.name", dict(convert=_reward_manager, target="(checked) / reward_fn.on_error",
                                        note="as reward_model.reward_manager")),
    ("reward.reward_manager.source", only("register", why="reward managers from a module")),
    ("reward.reward_manager.module.path", only(None, why="reward managers from a module")),
    ("reward.reward_manager.*", ignored("used with reward_manager.module.path only")),
    ("reward.reward_kwargs", dict(reads("reward.reward_manager.name"), dict_value=True)),
    ("reward.reward_model.enable", dict(convert=_reward_model("reward.reward_model.model_path"),
                                        target="reward_fn.type = huggingface_rm", note="as reward_model.enable")),
    ("reward.reward_model.model_path", reads("reward.reward_model.enable")),
    ("reward.reward_model.*", ignored(_SERVING)),
    ("reward.sandbox_fusion.url", ignored(_SANDBOX_FUSION)),
    ("reward.sandbox_fusion.*", ignored("used with sandbox_fusion.url only")),
    ("reward.num_workers", ignored("rewards are computed in this process")),
    ("sandbox_fusion.url", ignored(_SANDBOX_FUSION)),
    ("sandbox_fusion.*", ignored("used with sandbox_fusion.url only")),
]

"""benchmarks/e2e_grpo.py's system real-verl: the real verl (PyPI `verl` 0.9.x by volcengine, not this
repository) on the same work through its own CLI, `python3 -m verl.trainer.main_ppo` + Hydra overrides.
The e2e_grpo.py docstring describes the system; what here was read from real verl's sources, checked
on a CPU, or guessed is said beside `real_verl_overrides`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

import common
import e2e_work

HERE = os.path.dirname(os.path.abspath(__file__))
REWARD_FILE = os.path.join(HERE, "e2e_reward.py")


# ---------------------------------------------------------------------------
# real-verl: the PyPI `verl` 0.9.x (volcengine) through its own CLI, on the same work
# ---------------------------------------------------------------------------
# Written without a GPU, first run on the H200 on 2026-12-02 (results below). Every key below was read from the verl-0.9.1 wheel
# (`pip download --no-deps verl==0.9.1`, the version `verl[vllm]==0.9.*` resolves to):
#   verl/trainer/config/_generated_ppo_trainer.yaml   the flattened default config (every key used exists there,
#                                                     except the `+`-prefixed one, added to an empty dict)
#   verl/trainer/config/rollout/rollout.yaml          rollout keys: ignore_eos, enforce_eager, free_cache_engine,
#                                                     tensor_model_parallel_size (default 2!), max_num_batched_tokens
#   verl/workers/rollout/vllm_rollout/vllm_async_server.py  ignore_eos -> vLLM SamplingParams; max_tokens defaults
#                                                     to rollout.response_length; free_cache_engine=False skips
#                                                     the engine's sleep/wake around the update
#   verl/trainer/main_ppo.py                          Hydra entry point; trainer.use_v1 (default true) runs the v1
#                                                     trainer (verl/trainer/ppo/v1/trainer_sync.py, needs transferqueue)
#   verl/trainer/ppo/v1/trainer_base.py               per-step timers: step (around everything incl. the weight sync),
#                                                     gen, reward, old_log_prob, adv, update_actor; update_weights in
#                                                     trainer_sync.py; ppo_mini_batch_size counts prompts (x rollout.n)
#   verl/utils/logger/aggregate_logger.py             console line: "step:N - key:value - key:value ..." (pprint of
#                                                     each number, so numpy scalars print as np.float64(x))
#   verl/trainer/ppo/metric_utils.py                  timing_s/<stage>, perf/total_num_tokens, response_length/mean
#   verl/trainer/ppo/reward.py, verl/experimental/reward_loop/reward_manager/naive.py
#                                                     reward.custom_reward_function.{path,name}, called per sample as
#                                                     compute_score(data_source=, solution_str=, ground_truth=, extra_info=)
#   verl/utils/dataset/rl_dataset.py                  parquet rows: prompt = chat message list (gsm8k.py's columns)
#   verl/workers/config/model.py, verl/experimental/agent_loop/agent_loop.py
#                                                     model.custom_chat_template (our synthetic tokenizer has none; the
#                                                     agent loop always applies a chat template); attn_implementation
#                                                     comes from model.override_config (default flash_attention_2)
# Checked on a CPU (once, by hand, against the unpacked wheel with hydra-core 1.3.8): the override line composes with
# its ppo_trainer.yaml (struct mode, so every key exists; values land where meant); its RLHFDataset reads our
# parquet and renders the prompts with REAL_VERL_CHAT_TEMPLATE to exactly our prompt tokens; its
# load_extern_object loads the reward file. Not checked: anything that needs its Ray/vLLM/FSDP run.
# Seen on the H200 (2026-12-02, work (a), benchmarks/results/h200/e2e_grpo_a_real_verl_console_2026-12-02_session10.log):
# the override line ran as meant: a step's 26k tokens in one dynamic micro-batch (global_seqlen < 28800), the actor
# beside vLLM at 0.5 of the GPU with free_cache_engine=False (its max_memory_allocated 32 GiB), bf16 mixed precision
# over fp32 weights, FSDP1 (its default strategy), 9.95 s a step. Still guesses: that SDPA without remove-padding is
# real verl's fastest path here (flash-attn, which remove-padding wants, has no PyPI wheel, verl issue #6662), and
# that strategy=fsdp2 / use_fused_kernels would not change the ratio much (not tried: --real-verl-set); the float32
# and LoRA keys (works (b) and (c) did not run on real verl).
# Like-for-like (2026-12-03, CPU only): --work like-for-like appends e2e_work.REAL_VERL_LIKE_FOR_LIKE (bypass_mode with
# calculate_log_probs, FSDP2, use_fused_kernels, no checkpointing) and --real-verl-token-budget replaces the one
# micro-batch of a whole step. Checked on a CPU with hydra-core 1.3.8 against the 0.9.1 wheel's ppo_trainer.yaml
# (compose API, by hand): both lines compose, a repeated key takes its last value (strategy fsdp2, the ref's too by
# interpolation; log_prob_max_token_len_per_gpu follows ppo_max_token_len_per_gpu). Not checked: that fused kernels
# run without remove-padding, and real verl's LoRA rollout with load_format dummy.
REAL_VERL_DATA_SOURCE = "e2e_grpo"
# Renders the user message as plain text, as our verl (apply_chat_template false) and TRL see the prompt. No quotes
# inside: the value travels as a single-quoted Hydra string.
REAL_VERL_CHAT_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
REAL_VERL_REWARD = '''"""real-verl's reward file (written by benchmarks/e2e_grpo.py): the score of benchmarks/e2e_reward.py."""
import importlib.util

_spec = importlib.util.spec_from_file_location("e2e_reward", {path!r})
_reward = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_reward)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl 0.9's per-sample signature (NaiveRewardManager passes these by keyword)."""
    return float(_reward.reward([None], [solution_str], [None])[0])
'''


def real_verl_notes(args) -> str:
    """The table's note on the real-verl rows of this run (the work modes' differences: their captions)."""
    budget = getattr(args, "real_verl_token_budget", None)
    return ("real-verl: PyPI verl 0.9.1 (vLLM 0.24.0) via python3 -m verl.trainer.main_ppo, SDPA attention without "
            "remove-padding (no flash-attn wheel), no gradient checkpointing, "
            + (f"dynamic micro-batches of {budget} tokens" if budget else "one dynamic micro-batch per step")
            + ", vLLM with CUDA graphs and ignore_eos, "
            + ("the engine asleep during the update (free_cache_engine)" if budget else "no engine sleep")
            + "; step_s = its timing_s/step")


def real_verl_rows(prompts: list[str], split: str) -> list[dict]:
    """Rows in real verl's RL parquet format (the columns of its examples/data_preprocess/gsm8k.py)."""
    return [dict(data_source=REAL_VERL_DATA_SOURCE, prompt=[{"role": "user", "content": p}], ability="text",
                 reward_model={"style": "rule", "ground_truth": ""}, extra_info={"split": split, "index": i})
            for i, p in enumerate(prompts)]


def write_real_verl_parquet(path: str, prompts: list[str], split: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(real_verl_rows(prompts, split)), path)
    return path


def write_real_verl_reward(path: str) -> str:
    with open(path, "w") as fh:
        fh.write(REAL_VERL_REWARD.format(path=REWARD_FILE))
    return path


def real_verl_overrides(args, model_path: str, data_dir: str, reward_path: str, prompt_tokens: int) -> list[str]:
    """The Hydra overrides of `python3 -m verl.trainer.main_ppo` for this benchmark's work (see the notes above).
    prompt_tokens: the longest prompt in tokens; the prompt budget is that plus 8, and one dynamic micro-batch
    holds all of a step's sequences (as TRL's one micro-batch of all completions)."""
    n = args.prompts * args.group
    total = args.warmup + args.steps
    max_prompt = prompt_tokens + 8
    seq_tokens = n * (max_prompt + args.max_new_tokens)
    budget = getattr(args, "real_verl_token_budget", None)
    if budget:  # works (b)/(c): a whole step in one micro-batch does not fit without gradient checkpointing
        if budget < max_prompt + args.max_new_tokens:
            raise ValueError(f"--real-verl-token-budget {budget} is less than one sequence "
                             f"({max_prompt + args.max_new_tokens} tokens)")
        seq_tokens = budget  # its log-prob passes follow it (log_prob_max_token_len_per_gpu interpolates it)
    out = [
        # data: our prompts in its parquet format, in order, one step = --prompts prompts
        f"data.train_files={os.path.join(data_dir, 'train.parquet')}",
        f"data.val_files={os.path.join(data_dir, 'val.parquet')}",
        f"data.train_batch_size={args.prompts}",
        f"data.max_prompt_length={max_prompt}",
        f"data.max_response_length={args.max_new_tokens}",
        "data.shuffle=False",
        "data.filter_overlong_prompts=False",
        "data.truncation=error",
        # algorithm: GRPO, no KL anywhere
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        # model: the random model folder our benchmark saved, prompts rendered as plain text
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.model.custom_chat_template='{REAL_VERL_CHAT_TEMPLATE}'",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        # actor: lr 1e-6, one optimizer step over all completions, token-mean, no KL loss, no entropy bonus
        "actor_rollout_ref.actor.optim.lr=1e-6",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={seq_tokens}",
        # rollout: vLLM on the one GPU, full-length completions, sampling at temperature 1 / top-p 1
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.n={args.group}",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_p=1.0",
        "actor_rollout_ref.rollout.top_k=-1",
        "actor_rollout_ref.rollout.ignore_eos=True",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "actor_rollout_ref.rollout.enforce_eager=False",
        # works (b)/(c): the engine sleeps through the update (real verl's default, and what our verl does there):
        # its 0.5 of the GPU kept beside an update without checkpointing risks running out of memory; at (a) it stays awake
        f"actor_rollout_ref.rollout.free_cache_engine={bool(budget)}",
        f"actor_rollout_ref.rollout.max_num_seqs={max(256, n)}",
        f"actor_rollout_ref.rollout.max_num_batched_tokens={max(8192, n * max_prompt)}",
        # reward: benchmarks/e2e_reward.py through a compute_score wrapper
        f"reward.custom_reward_function.path={reward_path}",
        "reward.custom_reward_function.name=compute_score",
        # trainer: 1 GPU, console only, no validation, no checkpoints, warm-up + timed steps
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.logger=[console]",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={os.path.join(data_dir, 'checkpoints')}",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={total}",
        "trainer.project_name=e2e_grpo",
        f"trainer.experiment_name=real_verl_{args.arch}",
    ]
    if args.dtype == "float32":  # guess (FSDPEngineConfig.dtype is the mixed-precision param dtype)
        out += ["actor_rollout_ref.actor.fsdp_config.dtype=float32", "actor_rollout_ref.rollout.dtype=float32"]
    if args.lora_rank:  # guess: hf_model.yaml's lora_rank / lora_alpha / target_modules
        out += [f"actor_rollout_ref.model.lora_rank={args.lora_rank}",
                f"actor_rollout_ref.model.lora_alpha={2 * args.lora_rank}",
                "actor_rollout_ref.model.target_modules=all-linear"]
    # the work mode's overrides (e2e_work.REAL_VERL_LIKE_FOR_LIKE: bypass mode, FSDP2, fused kernels), then
    # --real-verl-set, last, so that Hydra's last-wins lets a flag change either
    return out + e2e_work.real_verl_overrides(getattr(args, "work", "defaults")) + \
        list(getattr(args, "real_verl_set", None) or [])


_REAL_VERL_STEP = re.compile(r"step:(\d+) - (.*)$")


def _real_verl_number(text: str):
    text = re.sub(r"\s*\[repeated .*$", "", text.strip())  # Ray's log de-duplication suffix
    m = re.fullmatch(r"(?:np\.\w+\()?(.*?)\)?", text)  # np.float64(1.5) under numpy 2
    try:
        return float(m.group(1))
    except (TypeError, ValueError):
        return None


def parse_real_verl_log(text: str) -> list[dict]:
    """Metrics of each training step from real verl's console logger, in step order (the last line
    of a step wins). Ray prefixes the actor's lines with "(TaskRunnerV1 pid=...)": matched anywhere."""
    steps: dict[int, dict] = {}
    for line in text.splitlines():
        m = _REAL_VERL_STEP.search(line)
        if not m:
            continue
        metrics = {}
        for item in m.group(2).split(" - "):
            key, sep, value = item.partition(":")
            number = _real_verl_number(value) if sep else None
            if number is not None:
                metrics[key.strip()] = number
        if "timing_s/step" in metrics:
            steps[int(m.group(1))] = metrics
    return [steps[k] for k in sorted(steps)]


def real_verl_steps(metrics: list[dict]) -> list[dict]:
    """The step records `summarize` reads, from parse_real_verl_log's metrics: wall_s = timing_s/step;
    stages = every other timing_s/<stage>, with gen (generation, rewards included) as rollout."""
    out = []
    for i, m in enumerate(metrics):
        stages = {("rollout" if k == "timing_s/gen" else k.split("/", 1)[1]): round(v, 3)
                  for k, v in m.items() if k.startswith("timing_s/") and k != "timing_s/step"}
        out.append(dict(step=i, wall_s=m["timing_s/step"], tokens=m.get("perf/total_num_tokens", 0),
                        completion_len=m.get("response_length/mean", 0), stages=stages,
                        # the trainer process's torch allocator only (vLLM runs in its own process)
                        peak_gib=m.get("perf/max_memory_allocated_gb")))
    return out


def _kill_group(proc) -> None:
    """SIGTERM, then SIGKILL, to the process group `proc` leads (started with start_new_session)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def _stop_ray(env: dict, cwd: str) -> None:
    """`ray stop --force` with real verl's Ray: its raylet, GCS server and actors (the vLLM engine among them)
    start sessions of their own, so ending main_ppo's group leaves them holding the GPU (50 GB on 2026-12-04,
    after a timeout). The benchmark machine runs no other Ray."""
    try:
        subprocess.run([sys.executable, "-c", "from ray.scripts.scripts import stop; "
                        "stop.main(['--force'], standalone_mode=False)"],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        print("real-verl: `ray stop --force` did not end within 90 s", file=sys.stderr)


def worker_real_verl(args, prompts: list[str]) -> dict:
    """`prompts`: the benchmark's prompt stream (e2e_grpo.make_prompts, as the verl worker's data.prompts).
    Runs real verl in a child process whose PYTHONPATH is only --real-verl-pythonpath, from a temporary
    folder (Ray puts the driver's folder on its workers' paths, and our checkout holds another `verl`)."""
    import signal

    from transformers import AutoTokenizer

    if not args.real_verl_pythonpath or not os.path.isdir(os.path.join(args.real_verl_pythonpath, "verl")):
        raise SystemExit(f"real-verl: --real-verl-pythonpath {args.real_verl_pythonpath!r} holds no verl package")
    if os.path.abspath(args.real_verl_pythonpath) == common.ROOT:
        raise SystemExit("real-verl: --real-verl-pythonpath must not be this checkout")
    work = tempfile.mkdtemp(prefix="real-verl-")
    write_real_verl_parquet(os.path.join(work, "train.parquet"), prompts, "train")
    write_real_verl_parquet(os.path.join(work, "val.parquet"), prompts[:args.prompts], "test")
    reward_path = write_real_verl_reward(os.path.join(work, "reward.py"))
    tok = AutoTokenizer.from_pretrained(args.model_path)
    prompt_tokens = max(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    overrides = real_verl_overrides(args, args.model_path, work, reward_path, prompt_tokens)
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=os.path.abspath(args.real_verl_pythonpath), RAY_DEDUP_LOGS="0", HYDRA_FULL_ERROR="1",
               PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", WANDB_MODE="disabled")
    probe = subprocess.run([sys.executable, "-c", "import verl; print(verl.__file__); print(verl.__version__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=300)
    found = probe.stdout.split()
    if probe.returncode or len(found) < 2 or not os.path.abspath(found[0]).startswith(env["PYTHONPATH"] + os.sep):
        raise SystemExit(f"real-verl: `import verl` with PYTHONPATH={env['PYTHONPATH']} gives "
                         f"{found or probe.stderr.strip()[-300:]}, not that folder's verl")
    with open(os.path.join(work, "command.json"), "w") as fh:
        json.dump(dict(cmd=cmd, cwd=work, pythonpath=env["PYTHONPATH"], verl=found), fh, indent=1)
    log_path = os.path.join(work, "real_verl.log")
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        # Its own session, so that its whole tree (Ray, the vLLM engine, the workers) can be ended as one group:
        # on our timeout, and when this worker is sent SIGTERM (h200_run.sh's `timeout` signals its group only).
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        signal.signal(signal.SIGTERM, lambda signum, frame: (_kill_group(proc), sys.exit(143)))
        try:
            # 60 s of --timeout left for ending its tree (up to 30 s), `ray stop` and the report: on 2026-12-04 a
            # 30 s margin let e2e_grpo's own timeout end this worker before it printed the steps it had
            rc = proc.wait(timeout=max(60, args.timeout - 60))
        except subprocess.TimeoutExpired:
            rc = "timeout"
        _kill_group(proc)  # also what outlived a normal exit
        _stop_ray(env, work)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    text = open(log_path, errors="replace").read()
    if args.logs:
        import shutil

        os.makedirs(args.logs, exist_ok=True)
        for name in ("real_verl.log", "command.json"):
            shutil.copy(os.path.join(work, name), os.path.join(args.logs, name))
    steps = real_verl_steps(parse_real_verl_log(text))
    print(f"real-verl: exit {rc} after {time.perf_counter() - t0:.0f} s, {len(steps)} steps, log {log_path}",
          file=sys.stderr)
    if len(steps) <= args.warmup:
        sys.stderr.write("\n".join(text.splitlines()[-200:]) + "\n")
        raise RuntimeError(f"real-verl: {len(steps)} steps in its log (exit {rc}); see {log_path}")
    return dict(steps=steps, overrides=overrides, exit=rc, log=log_path, version=found[1])

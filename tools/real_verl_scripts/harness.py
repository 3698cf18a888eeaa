"""Real verl's own example scripts, run through our `main_ppo`: the table in docs/real_verl.md.

    python -m tools.real_verl_scripts.harness           # run them all, print the table
    python -m tools.real_verl_scripts.harness --write   # ... and replace it in docs/real_verl.md
    python -m tools.real_verl_scripts.harness --only lora --only pfppo   # the scripts whose name has one (no --write)

Run them from the repository's root: the harness is a tool of this repository, not part of the installed package.

A script that trains a mixture-of-experts model (Qwen3-30B-A3B, Qwen1.5-MoE, DeepSeek-V3, ... by its
model path, or by its name where the path came from a shell variable: `moe_family`) runs on the tiny random MoE of its family instead (verl/models/tiny.py).

`tools/real_verl_scripts/scripts.txt` holds the arguments of every script under real verl's examples/ that runs
`python3 -m verl.trainer.main_ppo` (their key sets as bash passes them), and the config files
they name. `tiny_args` replaces only what a CPU box cannot have: the models (a tiny local GPT-2
folder; for a vision-language script, one that sets data.image_key, the tiny random Qwen2.5-VL of
verl/models/tiny_vl.py), the data (two-row parquet files in real verl's GSM8K layout; MATH, DAPO-Math and
AIME layouts for files of those names; geo3k rows with a PNG image each for a vision-language script),
the sizes (batch 2, mini-batch 2, micro-batch 2, rollout.n <= 2, prompts <= 64 tokens (256 with an image) and
responses 4 tokens, one device) and the steps (one); a saved LoRA adapter a script starts from (lora_adapter_path)
is one saved on the stand-in model (rank 8, all-linear); further, generation runs on `hf` when vLLM
or SGLang cannot run (not installed, or no GPU), the logger is the console (no network), checkpoints go to a
scratch folder, and files inside real verl's tree that a script reads (a custom reward file, a dataset
class, a sampler module named pkg://tests...: tools/real_verl_scripts/stand_ins.py) are stand-ins with the
same names and signatures; a relative data.custom_cls.path and a pkg:// sampler are read from that tree, as
the script runs in its root. Each script then either trains a step ("trains a
step"), or is refused with the one line main_ppo prints. tests/real_verl/test_real_verl_scripts.py translates
every script and trains a representative few, and checks the table against the outcome.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "scripts.txt")
DOC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "real_verl.md")
BEGIN, END = "<!-- real-verl-scripts:begin -->", "<!-- real-verl-scripts:end -->"
TRAINS = "trains a step"

# key -> its tiny value (sizes and steps); keys a script gives are replaced, these are always set
SIZES = {"data.train_batch_size": "2", "data.gen_batch_size": "2", "data.max_prompt_length": "64",
         "data.max_response_length": "4", "actor_rollout_ref.actor.ppo_mini_batch_size": "2",
         "critic.ppo_mini_batch_size": "2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "2",
         "actor_rollout_ref.actor.ppo_micro_batch_size": "2",
         "actor_rollout_ref.rollout.response_length": "4", "actor_rollout_ref.rollout.tensor_model_parallel_size": "1",
         "trainer.n_gpus_per_node": "1", "trainer.nnodes": "1", "trainer.total_epochs": "1",
         "trainer.total_training_steps": "1", "reward_model.reward_kwargs.max_resp_len": "4",
         "reward.reward_kwargs.max_resp_len": "4", "reward_model.reward_kwargs.overlong_buffer_cfg.len": "2",
         "reward.reward_kwargs.overlong_buffer_cfg.len": "2",
         # a context size: the script's 32768 is its Qwen's, the stand-in GPT-2 learns 512 positions
         "actor_rollout_ref.model.override_config.max_position_embeddings": "512",
         "actor_rollout_ref.model.override_config.model_config.max_position_embeddings": "512"}
# a vision-language script's prompt holds the image's tokens and geo3k's instruction (about 100 tokens here)
VISION_SIZES = {"data.max_prompt_length": "256"}
VISION_FAMILY = "qwen2_5_vl"  # the stand-in of a vision-language script's model (verl/models/tiny_vl.py)
ALWAYS = ("data.train_batch_size", "data.max_prompt_length", "data.max_response_length",
          "actor_rollout_ref.actor.ppo_mini_batch_size", "trainer.total_training_steps", "trainer.n_gpus_per_node")
ADAPTER_KEYS = ("actor_rollout_ref.model.lora_adapter_path", "actor_rollout_ref.model.lora.adapter_path")
MODEL_KEYS = ("actor_rollout_ref.model.path", "critic.model.path", "reward_model.model.path",
              "reward.reward_model.model_path", "critic.model.tokenizer_path", "data.tokenizer")
STAND_IN_REWARD = '''def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Stand-in for a custom reward file of real verl's tree: its signature, a GSM8K-style check."""
    return 1.0 if str(ground_truth) in solution_str else 0.0
'''


@dataclass
class Script:
    name: str  # its path in real verl's repository
    args: list[str]


@dataclass
class Examples:
    scripts: list[Script] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # path inside real verl's tree -> text


def load(path: str = DATA) -> Examples:
    out, current, file_name, file_lines = Examples(), None, None, []
    for line in open(path, encoding="utf-8").read().splitlines() + ["## end"]:
        if line.startswith(("## ", "%% file ")) and file_name:
            out.files[file_name] = "\n".join(file_lines).strip() + "\n"
            file_name, file_lines = None, []
        if line.startswith("## "):
            current = Script(line[3:].strip(), []) if line != "## end" else None
            if current:
                out.scripts.append(current)
        elif line.startswith("%% file "):
            current, file_name = None, line[len("%% file "):].strip()
        elif file_name is not None:
            file_lines.append(line)
        elif current is not None and line.strip() and not line.startswith("# "):
            current.args.append(line)
    return out


# ---------------------------------------------------------------------------
# The tiny stand-ins
# ---------------------------------------------------------------------------


GEO3K_INSTRUCTION = (r"You FIRST think about the reasoning process as an internal monologue and then provide the final "
                     r"answer. The reasoning process MUST BE enclosed within <think> </think> tags. The final answer "
                     r"MUST BE put in \boxed{}.")


def geo3k_image(i: int, size: int = 56) -> bytes:
    """A small PNG drawn with PIL: a triangle with a side labelled by the row's number (a different
    picture per row, so that images change the log-probs)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(img)
    draw.polygon([(4, size - 4), (size - 4, size - 4), (4 + (i * 7) % (size - 8), 6)], outline="black", fill=(
        (40 * i) % 256, 120, 200))
    draw.text((size // 2 - 4, size - 16), str(i % 10), fill="black")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def geo3k_row(i: int) -> dict:
    """One row as real verl's examples/data_preprocess/geo3k.py writes hiyouga/geometry3k: the problem
    (its "<image>" marker first) plus the instruction, the image as {bytes, path}, the answer."""
    problem = f"<image>Find x. The side is {i + 3}."
    return {"data_source": "hiyouga/geometry3k", "ability": "math",
            "prompt": [{"role": "user", "content": problem + " " + GEO3K_INSTRUCTION}],
            "images": [{"bytes": geo3k_image(i), "path": None}],
            "reward_model": {"style": "rule", "ground_truth": str(i + 3)},
            "extra_info": {"split": "train", "index": i, "answer": str(i + 3), "question": problem}}


def with_tool_agent(row: dict, content: str) -> dict:
    """`row` as real verl's examples/data_preprocess/gsm8k_tool_agent_loop.py writes it for its
    multi-turn scripts: agent_name tool_agent (so real verl runs its tool agent loop on the row), the
    answer-checking tools' create_kwargs and the GSM8K interaction's kwargs, both with the ground truth."""
    truth = row["reward_model"]["ground_truth"]
    create = {"create_kwargs": {"ground_truth": truth}}
    row["agent_name"] = "tool_agent"
    row["extra_info"] = {**row["extra_info"], "need_tools_kwargs": True,
                         "tools_kwargs": {"calc_gsm8k_reward": create, "calc_geo3k_reward": create},
                         "interaction_kwargs": {"name": "gsm8k", "query": content, "ground_truth": truth}}
    return row


def write_rows(path: str, kind: str, n: int = 2, start: int = 0, tool_agent: bool = False) -> str:
    """`n` rows in real verl's preprocessed layout: kind gsm8k (examples/data_preprocess/gsm8k.py),
    math (math_dataset.py: DigitalLearningGmbH/MATH-lighteval, \\boxed{} answers), dapo (DAPO-Math-17k:
    data_source math_dapo, 'Answer:' answers), aime (the same, data_source aime_2024) or geo3k
    (geo3k.py: hiyouga/geometry3k with one PNG image per row); `tool_agent`: for a multi-turn script
    (with_tool_agent)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for i in range(start, start + n):
        if kind == "geo3k":
            rows.append(geo3k_row(i))
        elif kind in ("dapo", "aime"):
            content = f"What is {i} + 4? Put the final answer after 'Answer:'."
            rows.append({"data_source": "math_dapo" if kind == "dapo" else "aime_2024", "ability": "MATH",
                         "prompt": [{"role": "user", "content": content}],
                         "reward_model": {"style": "rule-lighteval/MATH_v2", "ground_truth": str(i + 4)},
                         "extra_info": {"index": i}})
        elif kind == "math":
            content = f"What is {i} + 3? Let's think step by step and output the final answer within \\boxed{{}}."
            rows.append({"data_source": "DigitalLearningGmbH/MATH-lighteval", "ability": "math",
                         "prompt": [{"role": "user", "content": content}],
                         "reward_model": {"style": "rule", "ground_truth": str(i + 3)},
                         "extra_info": {"split": "train", "index": i}})
        else:
            content = f"What is {i} + 2? Let's think step by step and output the final answer after \"####\"."
            rows.append({"data_source": "openai/gsm8k", "ability": "math",
                         "prompt": [{"role": "user", "content": content}],
                         "reward_model": {"style": "rule", "ground_truth": str(i + 2)},
                         "extra_info": {"split": "train", "index": i}})
        if tool_agent:
            with_tool_agent(rows[-1], rows[-1]["prompt"][-1]["content"])
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _engine_runs(module: str) -> bool:
    """vLLM / SGLang generate here only when installed and a GPU is there (their CPU builds are not used)."""
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec(module) is not None


def _data_value(raw: str, split: str, work: str, vision: bool = False, tool_agent: bool = False) -> str:
    """The script's file (or list of files) -> tiny parquet files of the same kinds, in that order
    (a vision-language script's: geo3k rows with images; a multi-turn script's: with_tool_agent rows)."""
    import yaml

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    files = value if isinstance(value, list) else [value]
    out = []
    for i, f in enumerate(files):
        name = str(f).lower()
        kind = ("geo3k" if vision else "aime" if "aime" in name else "dapo" if "dapo" in name else
                "math" if "math" in name and "gsm8k" not in name else "gsm8k")
        path = os.path.join(work, f"{split}_{i}_{kind}{'_tools' if tool_agent else ''}.parquet")
        if not os.path.exists(path):
            write_rows(path, kind, start=100 if split == "val" else 0, tool_agent=tool_agent)
        out.append(path)
    return str(out) if isinstance(value, list) else out[0]


def is_vision(script: Script) -> bool:
    """A vision-language script: it names an image column (data.image_key), as real verl's geo3k ones do, or
    trains a vision-language model (a '-VL-' model path)."""
    return any(a.lstrip("+").startswith("data.image_key=") or (a.startswith("actor_rollout_ref.model.path=")
                                                               and "-VL-" in a) for a in script.args)


MOE_NAMES = re.compile(r"moe|[-_]a\d+(\.\d+)?b(?![a-z0-9])|mixtral|deepseek-v3|moonlight|gpt-oss|olmoe", re.IGNORECASE)


def moe_family(script: Script) -> str:
    """The tiny MoE stand-in of a script that trains a mixture-of-experts model ('' for a dense one): Qwen2-MoE
    for Qwen1.5/Qwen2-MoE, Mixtral for Mixtral, OLMoE for OLMoE, Qwen3-MoE for the others (Qwen3-30B-A3B,
    DeepSeek-V3, Moonlight, gpt-oss: MoE decoders of families not built in here)."""
    path = next((a.split("=", 1)[1] for a in script.args if a.startswith("actor_rollout_ref.model.path=")), "")
    path = path or script.name  # a path from a shell variable the arguments lost: the script's own name says it
    if not MOE_NAMES.search(path):
        return ""
    low = path.lower()
    return ("qwen2_moe" if "qwen1.5-moe" in low or "qwen2-moe" in low else "mixtral" if "mixtral" in low else
            "olmoe" if "olmoe" in low else "qwen3_moe")


def is_multi_turn(script: Script) -> bool:
    """A multi-turn script: it names real verl's tool or interaction file."""
    return any(a.split("=", 1)[0].endswith(("multi_turn.tool_config_path", "multi_turn.interaction_config_path"))
               for a in script.args)


def tiny_args(script: Script, work: str, model: str, root: str, vision_model: str = "") -> list[str]:
    """The script's arguments with model, data, sizes and steps replaced (module doc); `work` is
    this run's scratch folder, `root` stands for real verl's tree (provide_files). A vision-language
    script (is_vision) runs on `vision_model` with geo3k rows, when one is given."""
    vision = bool(vision_model) and is_vision(script)
    tool_agent = is_multi_turn(script)
    if not vision and moe_family(script):  # a mixture-of-experts script trains the tiny MoE of its family
        from verl.models.tiny import tiny_model_path

        model = tiny_model_path(moe_family(script))
    model = vision_model if vision else model
    sizes = {**SIZES, **(VISION_SIZES if vision else {})}
    args, seen = [], set()
    for arg in script.args:
        arg = arg.replace("{real_verl}", root)
        if arg.startswith("-") or "=" not in arg:
            args.append(arg)
            continue
        raw_key, value = arg.split("=", 1)
        key = raw_key.lstrip("+")
        seen.add(key)
        if key in ("data.train_files", "data.val_files"):
            value = _data_value(value, "train" if key == "data.train_files" else "val", work, vision, tool_agent)
        elif key in MODEL_KEYS:
            value = model
        elif key in ADAPTER_KEYS and value not in ("null", "None", ""):
            value = stand_in_adapter(model, os.path.dirname(root))
        elif key in sizes:
            value = sizes[key]
        elif key == "actor_rollout_ref.rollout.n":
            value = str(min(2, int(float(value))))
        elif key == "actor_rollout_ref.rollout.name" and value in ("vllm", "sglang") and not _engine_runs(value):
            value = "hf"
        elif key == "trainer.logger":
            value = "['console']"
        elif key == "trainer.default_local_dir":
            value = os.path.join(work, "out")
        elif key == "data.custom_cls.path" and not os.path.isabs(value):  # the script runs in real verl's root
            value = os.path.join(root, value)
        elif key == "data.sampler.class_path" and value.startswith("pkg://"):  # a module of real verl's tree
            value = os.path.join(root, *value[len("pkg://"):].replace("/", ".").split(".")) + ".py"
        args.append(f"{raw_key}={value}")
    if "data.train_files" not in seen:
        args.append(f"data.train_files={_data_value('gsm8k', 'train', work, vision, tool_agent)}")
    if "actor_rollout_ref.model.path" not in seen:  # real verl's default model, replaced as a given one is
        args.append(f"actor_rollout_ref.model.path={model}")
    args += [f"{k}={sizes[k]}" for k in ALWAYS if k not in seen]
    for k, v in (("trainer.default_local_dir", os.path.join(work, "out")), ("trainer.logger", "['console']"),
                 ("trainer.device", "cpu")):
        if k not in seen:
            args.append(f"{k}={v}")
    return args


def stand_in_adapter(model: str, work: str) -> str:
    """A peft LoRA adapter (rank 8, all-linear) saved on `model` in `work` (once): a script's saved adapter."""
    folder = os.path.join(work, "stand_in_lora_adapter_" + os.path.basename(model.rstrip("/")))
    if not os.path.exists(os.path.join(folder, "adapter_config.json")):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(model),
                                    LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
        peft_model.save_pretrained(folder)
    return folder


def provide_files(examples: Examples, root: str) -> None:
    """The files inside real verl's tree (at `root`) the scripts read: the trimmed configs, stand-in rewards,
    dataset classes and samplers (tools/real_verl_scripts/stand_ins.py)."""
    from tools.real_verl_scripts import stand_ins

    texts: dict[str, str] = {}  # path -> its text (retool.py holds both a reward and a dataset class)
    for rel, text in examples.files.items():
        texts[os.path.join(root, rel)] = text
    for script in examples.scripts:
        for arg in script.args:
            key, _, value = arg.partition("=")
            key = key.lstrip("+")
            rel = value.replace("{real_verl}/", "")
            if key.endswith("custom_reward_function.path") and "{real_verl}" in value:
                texts[os.path.join(root, rel)] = STAND_IN_REWARD + texts.get(os.path.join(root, rel), "")
            elif key == "data.custom_cls.path" and rel in stand_ins.DATASETS:
                texts[os.path.join(root, rel)] = texts.get(os.path.join(root, rel), "") + stand_ins.DATASETS[rel]
    for module, text in stand_ins.MODULES.items():
        texts[os.path.join(root, *module.split(".")) + ".py"] = text
    for path, text in texts.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


# ---------------------------------------------------------------------------
# Running them
# ---------------------------------------------------------------------------


def outcome(script: Script, work: str, model: str, train: bool, vision_model: str = "") -> str:
    """TRAINS, or the one line main_ppo refuses the script with (scratch paths shown as <tmp>).
    train=False stops after the translation and all checks (the model's config.json is read, no weights load,
    nothing trains). The script runs as from real verl's root: modules of its tree (a tool class its tool file
    names, recipe.retool.retool...) import, as `python3 -m` puts the working directory on the path."""
    root = os.path.join(work, "real_verl")
    sys.path.insert(0, root)
    try:
        return _outcome(script, work, model, train, vision_model)
    finally:
        sys.path.remove(root)
        for name in [m for m, mod in list(sys.modules.items()) if _inside(mod, root)]:
            del sys.modules[name]  # the next script's tree may be another folder


def _inside(module, root: str) -> bool:
    """A module imported from `root` (a file there, or a namespace package whose path is there)."""
    own = getattr(module, "__dict__", {})  # not getattr: a lazy module would import on a missing name
    paths = [own.get("__file__")]
    try:
        paths += list(own.get("__path__") or [])
    except TypeError:  # a module whose __path__ is not a list of folders (torch's _classes)
        pass
    return any(isinstance(p, str) and p.startswith(root) for p in paths)


def _outcome(script: Script, work: str, model: str, train: bool, vision_model: str = "") -> str:
    from verl.compat.translate import load_translated, translate
    from verl.errors import ConfigError
    from verl.trainer.main_ppo import main

    run_dir = tempfile.mkdtemp(dir=work)
    args = tiny_args(script, run_dir, model, os.path.join(work, "real_verl"), vision_model)
    if not train:
        from verl.models.loading import check_context_length
        from verl.rollout.agent_parts import load_agent_parts

        try:
            cfg = load_translated(translate(args))
            check_context_length(cfg)  # the model's config.json, no weights
            load_agent_parts(cfg.rollout)  # tool and interaction files, their classes built
        except ConfigError as exc:
            return _scrub(str(exc), run_dir, work, models=(model, vision_model))
        return TRAINS
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(args)
    if rc == 0:
        metrics = os.path.join(run_dir, "out", "metrics.jsonl")
        return TRAINS if os.path.exists(metrics) else f"exit 0 without metrics ({metrics})"
    errors = [line[len("error: "):] for line in err.getvalue().splitlines() if line.startswith("error: ")]
    return _scrub(errors[-1] if errors else f"exit code {rc}", run_dir, work, models=(model, vision_model))


def _scrub(text: str, *dirs: str, models: tuple = ()) -> str:
    """`text` without this machine's paths: the scratch folders as <tmp>, the stand-in models as <tiny model>."""
    for m in models:
        text = text.replace(m, "<tiny model>") if m else text
    for d in dirs:
        text = text.replace(d, "<tmp>")
    return re.sub(r"<tmp>/tmp[\w]+", "<tmp>", text)


def run_all(train: bool = True, names=None) -> dict[str, str]:
    from verl.models.tiny import tiny_model_path
    from verl.models.tiny_vl import tiny_vl_model_path

    examples, results = load(), {}
    model, vision_model = tiny_model_path("gpt2"), tiny_vl_model_path(VISION_FAMILY)
    with tempfile.TemporaryDirectory() as work:
        provide_files(examples, os.path.join(work, "real_verl"))
        for script in examples.scripts:
            if names is None or script.name in names:
                results[script.name] = outcome(script, work, model, train, vision_model)
    return results


def reason(line: str) -> str:
    """What a refusal is about: the key (or option) it names."""
    m = re.match(r"(?:real verl's )?(--[\w-]+=[\w.]+|[\w.]+)", line)
    return re.sub(r"\.yaml$", "", m.group(1)) if m else line


def render_table(results: dict[str, str]) -> str:
    trains = sum(1 for r in results.values() if r == TRAINS)
    reasons: dict[str, int] = {}
    for r in results.values():
        if r != TRAINS:
            reasons[reason(r)] = reasons.get(reason(r), 0) + 1
    by = ", ".join(f"{n} `{k}`" for k, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    lines = [f"{trains} of {len(results)} scripts train a step; {len(results) - trains} are refused with the line "
             f"shown, by what they name: {by}.", "", "| real verl script | here |", "|---|---|"]
    for name, result in results.items():
        lines.append(f"| `{name}` | {result.replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


def doc_rows(path: str = DOC) -> dict[str, str]:
    """{script: its outcome} as docs/real_verl.md's table says."""
    text = open(path, encoding="utf-8").read().split(BEGIN, 1)[1].split(END, 1)[0]
    rows = {}
    for line in text.splitlines():
        m = re.fullmatch(r"\| `([^`]+)` \| (.*) \|", line.strip())
        if m:
            rows[m.group(1)] = m.group(2).replace("\\|", "|")
    return rows


def write(results: dict[str, str], path: str = DOC) -> None:
    from verl.compat.doc_table import replace_between

    replace_between(path, BEGIN, END, render_table(results))


def _only(argv: list[str]):
    """The script names `--only SUBSTRING` (repeatable) selects, or None (all)."""
    wanted = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--only"]
    if not wanted:
        return None
    return {s.name for s in load().scripts if any(w in s.name for w in wanted)}


if __name__ == "__main__":
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        print(__doc__.split("`tools/real_verl_scripts/scripts.txt`", 1)[0].rstrip())
        sys.exit(0)
    selected = _only(sys.argv[1:])
    if selected is not None and "--write" in sys.argv[1:]:
        sys.exit("--write rewrites the whole table: run it without --only")
    found = run_all(train=True, names=selected)
    if "--write" in sys.argv[1:]:
        write(found)
    print(render_table(found) if selected is None else "\n".join(f"| `{k}` | {v} |" for k, v in found.items()))

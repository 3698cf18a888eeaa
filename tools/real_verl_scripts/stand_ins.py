"""Stand-ins for the Python files of real verl's tree that its example scripts name as classes: written by
tools/real_verl_scripts/harness.py where the scripts look for them, with the classes' names, constructor
signatures and what their rows hold, but reading the harness's tiny parquet files.

* recipe/retool/retool.py CustomRLHFDataset (sglang_multiturn/run_qwen3_4b_dapo_multiturn.sh): a subclass of
  RLHFDataset whose _read_files_and_tokenize maps each DAPO row as retool's map_fn2 does (the answer format
  appended to the question, agent_name tool_agent); and its CustomSandboxFusionTool, the sandbox tool that
  takes the code out of a ```python fence and prints its last line (the script's tool file names it).
* recipe/minicpmo/rl_dataset.py RLHFDataset (grpo_trainer/run_minicpmo2_6.sh): its own torch Dataset, as
  MiniCPM-o's: __getitem__ pops the prompt and the image column, puts the images in multi_modal_data["image"],
  the messages in raw_prompt (return_raw_chat, real verl 0.9's default) and its own tokens in input_ids.
* tests/utils/dataset/test_create_rl_sampler_on_cpu.py RandomCurriculumSampler (the two curriculum scripts
  name it as pkg://tests.utils...): real verl's test sampler, torch's RandomSampler without a generator and an
  update() that does nothing.
"""

RETOOL_DATASET = '''
import re

from verl.tools.sandbox_fusion_tools import SandboxFusionTool
from verl.utils.dataset import RLHFDataset


class CustomSandboxFusionTool(SandboxFusionTool):
    """Stand-in for retool's code tool: the code inside a ```python fence when there is one, its last line
    printed when it does not print itself, then the sandbox tool's own run."""

    async def execute(self, instance_id, parameters, **kwargs):
        code = str(parameters["code"])
        fenced = re.findall(r"```python(.*?)```", code, re.DOTALL)
        lines = (fenced[0].strip() if fenced else code).split("\\n")
        last = max((i for i, line in enumerate(lines) if line), default=None)
        if last is not None and not lines[last].startswith("print"):
            lines[last] = f"print({lines[last]})"
        return await super().execute(instance_id, {**parameters, "code": "\\n".join(lines)}, **kwargs)


answer_format = """\\nThe answer format must be: \\\\boxed{'The final answer goes here.'}"""


class CustomRLHFDataset(RLHFDataset):
    """Stand-in for retool's CustomRLHFDataset: the tiny DAPO rows mapped as its map_fn2."""

    def _read_files_and_tokenize(self):
        super()._read_files_and_tokenize()
        self.dataframe = self.dataframe.map(self.map_fn2)

    def map_fn2(self, row):
        row["prompt"][0]["content"] = row["prompt"][0]["content"] + answer_format
        row["agent_name"] = "tool_agent"
        return row
'''

MINICPMO_DATASET = '''
import io

import pyarrow.parquet as pq
from PIL import Image
from torch.utils.data import Dataset


class RLHFDataset(Dataset):
    """Stand-in for MiniCPM-o's RLHFDataset: its own rows (images in multi_modal_data, its own tokens)."""

    def __init__(self, data_files, tokenizer, config, processor=None):
        self.tokenizer, self.processor, self.config = tokenizer, processor, config
        self.prompt_key = config.get("prompt_key", "prompt")
        self.image_key = config.get("image_key", "images")
        self.return_raw_chat = config.get("return_raw_chat", False)
        files = data_files if isinstance(data_files, list) else [data_files]
        self.rows = [r for f in files for r in pq.read_table(f).to_pylist()]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, item):
        row = dict(self.rows[item])
        messages = row.pop(self.prompt_key)
        images = [Image.open(io.BytesIO(i["bytes"])).convert("RGB") for i in row.pop(self.image_key)]
        row["multi_modal_data"] = {"image": images}
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        row["input_ids"] = self.tokenizer(text, return_tensors="pt")["input_ids"][0]
        if self.return_raw_chat:
            row["raw_prompt"] = messages
        return row
'''

CURRICULUM_SAMPLER = '''
from torch.utils.data import RandomSampler

from verl.experimental.dataset.sampler import AbstractCurriculumSampler


class RandomCurriculumSampler(AbstractCurriculumSampler):
    """Stand-in for real verl's test sampler: a RandomSampler on the global generator; update() does nothing."""

    def __init__(self, data_source, data_config):
        self.sampler = RandomSampler(data_source=data_source)

    def __iter__(self):
        return self.sampler.__iter__()

    def __len__(self):
        return len(self.sampler)

    def update(self, batch):
        return
'''

# path inside real verl's tree -> the stand-in text of that file (its dataset class)
DATASETS = {"recipe/retool/retool.py": RETOOL_DATASET, "recipe/minicpmo/rl_dataset.py": MINICPMO_DATASET}
# a module of real verl's tree that a script names as pkg://... -> the stand-in text of its file
MODULES = {"tests.utils.dataset.test_create_rl_sampler_on_cpu": CURRICULUM_SAMPLER}

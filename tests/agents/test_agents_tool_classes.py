"""Real verl's tool classes and interactions in verl's multi-turn rollout (verl/tools, verl/interactions):
the YAML layouts, the per-call lifecycle, the built-in tools' answers, and the rollout's turn rules
(a call goes to the tools, a turn without one to the interaction; max_calls_per_turn; single-turn rows)."""

from __future__ import annotations

import asyncio
import http.server
import json
import textwrap
import threading

import pytest

from multi_turn_helpers import ScriptedEngine, _enc, _prompts
from verl.agents.tools import ToolContext, ToolRunner, truncated_text
from verl.config import RolloutConfig
from verl.config.rollout import MultiTurnConfig
from verl.errors import ConfigError
from verl.interactions.gsm8k_interaction import CORRECT, INCORRECT, Gsm8kInteraction
from verl.interactions.interaction_config import interaction_environment
from verl.rollout.base import SamplingParams
from verl.rollout.multi_turn import MultiTurnRollout
from verl.tools.tool_config import load_tool_config

GSM8K_YAML = """
tools:
  - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
    config:
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        description: "A tool for calculating the reward of gsm8k."
        parameters:
          type: "object"
          properties:
            answer: {type: "string", description: "The model's answer"}
          required: ["answer"]
"""
INTERACTION_YAML = """
interaction:
  - name: "gsm8k"
    class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"
    config: {}
"""


class Call:
    def __init__(self, name, arguments):
        self.name, self.arguments = name, arguments


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture(scope="module")
def qwen_tok(tiny_qwen2):
    from verl.models.loading import load_tokenizer

    return load_tokenizer(tiny_qwen2)


def _ctx(ground_truth):
    return ToolContext(request_id="r", tools_kwargs={"calc_gsm8k_reward": {"create_kwargs": {"ground_truth":
                                                                                              ground_truth}}})


def test_the_gsm8k_tool_answers_and_charges_as_real_verls(tmp_path):
    (tool,) = load_tool_config(_write(tmp_path, "t.yaml", GSM8K_YAML))
    assert tool.name == "calc_gsm8k_reward" and tool.contextual and not tool.check_schema
    assert tool.schema["function"]["parameters"]["required"] == ["answer"]
    runner = ToolRunner([tool])
    calls = [Call("calc_gsm8k_reward", {"answer": "72"}), Call("calc_gsm8k_reward", {"answer": "71"}),
             Call("calc_gsm8k_reward", {"answer": "the total is 72"}), Call("calc_gsm8k_reward", {"answer": 72})]
    right, wrong, flexible, number = runner.run(calls, [_ctx("72")] * 4)
    # '#### 72' equals the truth: reward 1.0 > the fresh instance's 0.0, so no charge
    assert (right.text, right.reward, right.ok) == ("Current parsed answer='72' reward=1.0", 0.0, True)
    # a wrong answer scores 0.0, not above 0.0: charged 0.05
    assert (wrong.text, wrong.reward) == ("Current parsed answer='71' reward=0.0", -0.05)
    # flexible mode: the last number of '#### the total is 72' is 72
    assert flexible.reward == 0.0 and flexible.text.endswith("reward=1.0")
    # a number argument reaches the class unchecked (real verl's loop does not check the schema) and is str()-ed
    assert number.ok and number.text == "Current parsed answer='72' reward=1.0"


USER_TOOL = '''
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

LOG = []


class Lookup(BaseTool):
    """A user's own tool class, written against real verl's interface."""

    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        self.table = config["table"]
        self.state = {}

    async def create(self, instance_id=None, **kwargs):
        instance_id, _ = await super().create(instance_id)
        self.state[instance_id] = kwargs["create_kwargs"]
        LOG.append(("create", kwargs["create_kwargs"]))
        return instance_id, ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        LOG.append(("execute", parameters, kwargs["agent_data"].request_id))
        city = parameters["city"]
        bonus = self.state[instance_id].get("bonus", 0)
        return ToolResponse(text=f"{self.table[city] + bonus} C"), 0.5, {"hits": 1}

    async def release(self, instance_id, **kwargs):
        LOG.append(("release", instance_id in self.state))
        del self.state[instance_id]
'''


def test_a_users_tool_class_runs_create_execute_release_per_call(tmp_path):
    path = _write(tmp_path, "lookup.py", USER_TOOL)
    cfg = _write(tmp_path, "tools.yaml", f"""
        tools:
          - class_name: "{path}:Lookup"
            config: {{type: native, table: {{paris: 20, oslo: 5}}}}
            tool_schema:
              type: function
              function:
                name: lookup
                description: a city's temperature
                parameters: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}
        """)
    (tool,) = load_tool_config(cfg)
    ctx = ToolContext(request_id="traj-7", tools_kwargs={"lookup": {"create_kwargs": {"bonus": 1}}})
    (res,) = ToolRunner([tool]).run([Call("lookup", {"city": "oslo"})], [ctx])
    assert (res.text, res.reward, res.ok) == ("6 C", 0.5, True)  # 5 + the row's bonus 1
    from verl.agents.tools import _FILE_MODULES

    log = next(m for p, m in _FILE_MODULES.items() if p.endswith("lookup.py")).LOG
    assert log == [("create", {"bonus": 1}), ("execute", {"city": "oslo"}, "traj-7"), ("release", True)]
    # an unknown key in the arguments raises inside execute: an error answer, and release still ran
    (bad,) = ToolRunner([tool]).run([Call("lookup", {"town": "oslo"})], [ctx])
    assert not bad.ok and bad.kind == "raised" and "KeyError" in bad.text and log[-1] == ("release", True)


@pytest.mark.parametrize("text, problem", [
    ("tools: []", "non-empty 'tools:' list"),
    ("tools:\n  - config: {type: native}\n", "class_name is required"),
    ("tools:\n  - class_name: verl.tools.nope.Tool\n    config: {type: native}\n", "cannot import 'verl.tools.nope'"),
    ("tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: mcp}\n", "MCP servers are not supported"),
    ("tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: native}\n", "no tool schema"),
    ("tools: [", "not valid YAML"),
])
def test_a_bad_tool_file_is_one_line_naming_the_key_and_entry(tmp_path, text, problem):
    path = _write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_tool_config(path)
    assert str(err.value).startswith("rollout.tool_config") and problem in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="not found"):
        load_tool_config(str(tmp_path / "missing.yaml"))


def test_truncation_keeps_the_head_the_tail_or_both_ends():
    text = "abcdefghij"  # 10 characters, cut to 4: 6 dropped
    assert truncated_text(text, 4, "head") == "abcd\n[... output truncated: 6 more characters]"
    assert truncated_text(text, 4, "tail") == "[... output truncated: 6 more characters]\nghij"
    assert truncated_text(text, 4, "middle") == "ab\n[... output truncated: 6 more characters]\nij"


class Retrieval(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Retrieval.seen.append(body)
        docs = [[{"document": {"contents": f"Title {q}\nabout {q}"}}] for q in body["queries"]]
        payload = json.dumps({"result": docs}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_the_search_tool_queries_the_configured_retrieval_server():
    from verl.tools.schemas import OpenAIFunctionToolSchema
    from verl.tools.search_tool import SearchTool

    server = http.server.HTTPServer(("127.0.0.1", 0), Retrieval)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        schema = OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": "search"}})
        tool = SearchTool({"retrieval_service_url": f"http://127.0.0.1:{server.server_port}/retrieve", "topk": 2},
                          schema)
        iid, _ = asyncio.run(tool.create())
        response, reward, _ = asyncio.run(tool.execute(iid, {"query_list": ["a", "b"]}))
    finally:
        server.shutdown()
    assert Retrieval.seen == [{"queries": ["a", "b"], "topk": 2, "return_scores": True}]
    assert json.loads(response.text) == {"result": "Doc 1 (Title: Title a)\nabout a\n---\nDoc 1 (Title: Title b)\nabout b"}
    assert reward == 0.0
    bad, _, _ = asyncio.run(tool.execute(iid, {"query_list": "a"}))
    assert "query_list should be a list" in bad.text


def test_the_sandbox_fusion_tool_runs_python_in_the_local_sandbox():
    from verl.tools.sandbox_fusion_tools import SandboxFusionTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    schema = OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": "code_interpreter"}})
    tool = SandboxFusionTool({"sandbox_fusion_url": "https://unused.example/run_code", "default_timeout": 5}, schema)
    iid, _ = asyncio.run(tool.create())
    out, reward, metrics = asyncio.run(tool.execute(iid, {"code": "print(6 * 7)"}))
    assert out.text == "42\n" and reward is None and metrics is None
    slow, _, _ = asyncio.run(tool.execute(iid, {"code": "while True: pass", "timeout": 1}))
    assert slow.text == "no stdout here"
    other, _, _ = asyncio.run(tool.execute(iid, {"code": "x", "language": "cpp"}))
    assert "only python" in other.text


def test_the_gsm8k_interaction_scores_strictly_and_ends_when_correct():
    it = Gsm8kInteraction({"name": "gsm8k"})
    asyncio.run(it.start_interaction("i", ground_truth="72"))
    # strict mode: '72' without '#### ' is no answer
    done, text, score, _ = asyncio.run(it.generate_response("i", [{"role": "assistant", "content": "it is 72"}]))
    assert (done, text, score) == (False, INCORRECT, 0.0)
    done, text, score, _ = asyncio.run(it.generate_response("i", [{"role": "assistant", "content": "so #### 72"}]))
    assert (done, text, score) == (True, CORRECT, 1.0)


def _rollout(tok, engine, tmp_path, **cfg):
    from verl.rollout.agent_parts import rollout_tools

    if "multi_turn" in cfg:
        cfg["multi_turn"] = MultiTurnConfig(**cfg["multi_turn"])
    rc = RolloutConfig(**cfg)
    env = interaction_environment(rc.interaction_config, timeout_s=2.0) if rc.interaction_config else None
    return MultiTurnRollout(engine, tok, rc, chat=True, tools=rollout_tools(rc), environment=env)


def test_tool_calls_go_to_the_tool_and_a_turn_without_one_to_the_interaction(qwen_tok, tmp_path):
    """Row 0: a call (tool answers), then '#### 72' (the interaction: correct, ends). Row 1: a wrong answer
    (the interaction: incorrect), then the right one. Hand-built: the tool's turn and the user turns."""
    tok = qwen_tok
    call = _enc(tok, '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "72"}}</tool_call>')
    right = _enc(tok, "#### 72") + [tok.eos_token_id]
    wrong = _enc(tok, "#### 7") + [tok.eos_token_id]
    engine = ScriptedEngine(tok, [[call, wrong], [right, right]])
    mt = _rollout(tok, engine, tmp_path, tool_config=_write(tmp_path, "t.yaml", GSM8K_YAML),
                  interaction_config=_write(tmp_path, "i.yaml", INTERACTION_YAML))
    prompts, _ = _prompts(tok, ["q0", "q1"])
    kwargs = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "72"}}}
    prompts.extra = [{"tools_kwargs": kwargs, "interaction_kwargs": {"name": "gsm8k", "ground_truth": "72"}}] * 2
    out = mt.generate(prompts, SamplingParams(max_new_tokens=64))
    e0, e1 = out.extra
    assert [t["role"] for t in e0["turns"]] == ["assistant", "tool", "assistant", "environment"]
    assert e0["turns"][1]["text"] == "Current parsed answer='72' reward=1.0" and e0["tool_rewards"] == [0.0]
    assert e0["turns"][3]["text"] == CORRECT and e0["turns"][3]["reward"] == 1.0
    assert [t["role"] for t in e1["turns"]] == ["assistant", "environment", "assistant", "environment"]
    assert [t["text"] for t in e1["turns"][1::2]] == [INCORRECT, CORRECT]
    assert e1["tool_rewards"] == [] and e1["env_reward"] == 1.0
    # the user turn after the wrong answer is in row 1's second context, as a user message
    assert tok.decode(engine.contexts[1][1]).count(INCORRECT) == 1
    assert mt.metrics()["agent/tool_reward_mean"] == 0.0


def test_max_calls_per_turn_runs_the_first_calls_of_a_turn_that_runs_to_its_end(qwen_tok, tmp_path):
    tok = qwen_tok
    two = _enc(tok, '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "1"}}</tool_call> and '
                    '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "72"}}</tool_call>') + [
        tok.eos_token_id]
    done = _enc(tok, "ok") + [tok.eos_token_id]
    engine = ScriptedEngine(tok, [[two], [done]])
    mt = _rollout(tok, engine, tmp_path, tool_config=_write(tmp_path, "t.yaml", GSM8K_YAML),
                  multi_turn={"stop_at_tool_call": False, "max_calls_per_turn": 1})
    prompts, _ = _prompts(tok, ["q"])
    prompts.extra = [{"tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "72"}}}}]
    sampling = SamplingParams(max_new_tokens=64)
    out = mt.generate(prompts, sampling)
    tools = [t for t in out.extra[0]["turns"] if t["role"] == "tool"]
    assert [t["text"] for t in tools] == ["Current parsed answer='1' reward=0.0"]  # the second call is not run
    assert out.extra[0]["num_tool_calls"] == 1


def test_a_single_turn_row_ends_after_one_turn_and_its_prompt_shows_no_tools(qwen_tok, tmp_path):
    from verl.data.prompts import PromptLoader
    from verl.data.sources import record_to_row
    from verl.config import DataConfig

    tok = qwen_tok
    call = _enc(tok, '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "72"}}</tool_call>')
    done = _enc(tok, "ok") + [tok.eos_token_id]
    engine = ScriptedEngine(tok, [[call, call], [done]])
    mt = _rollout(tok, engine, tmp_path, tool_config=_write(tmp_path, "t.yaml", GSM8K_YAML),
                  multi_turn={"default_agent": "single_turn_agent"})
    prompts, _ = _prompts(tok, ["q0", "q1"])
    prompts.extra = [{"agent_name": "tool_agent"}, {}]  # row 1 takes the default: single turn
    out = mt.generate(prompts, SamplingParams(max_new_tokens=64))
    assert out.extra[0]["num_turns"] == 2 and out.extra[1]["num_turns"] == 1
    assert len(engine.contexts[1]) == 1  # only row 0 went on
    # the data side: a row's top-level agent_name is kept, and a single-turn row's prompt has no tools
    rows = [record_to_row({"prompt": [{"role": "user", "content": "q"}], "agent_name": name}) for name in
            ("tool_agent", "single_turn_agent")]
    schema = [{"type": "function", "function": {"name": "calc_gsm8k_reward", "description": "d",
                                                "parameters": {"type": "object", "properties": {}}}}]
    import copy
    import os

    import trl

    with_tools = copy.deepcopy(tok)  # a template that shows tools: Qwen2.5's (as TRL ships it)
    with_tools.chat_template = open(os.path.join(os.path.dirname(trl.__file__), "chat_templates",
                                                 "qwen2_5.jinja")).read()
    loader = PromptLoader(rows, with_tools, DataConfig(max_prompt_length=1024), batch_size=2, tools=schema,
                          default_agent="single_turn_agent")
    assert "calc_gsm8k_reward" in loader.texts[0] and "calc_gsm8k_reward" not in loader.texts[1]
    bad = [record_to_row({"prompt": "q", "agent_name": "react_agent"}, where="train.parquet row 3")]
    with pytest.raises(ValueError, match="train.parquet row 3: agent_name 'react_agent' is not an agent loop"):
        PromptLoader(bad, tok, DataConfig(), batch_size=1, tools=schema)


def test_a_prompts_images_stay_with_its_trajectory_in_later_turns(qwen_tok, tmp_path):
    """Each later context of a row with images keeps them, and the engine's unexpanded prompt ids (what
    vLLM / SGLang expand themselves) go on with the turns, as the expanded input_ids do."""
    from PIL import Image

    from verl.data.multimodal import MultiModalInputs

    tok = qwen_tok
    call = _enc(tok, '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "72"}}</tool_call>')
    done = _enc(tok, "ok") + [tok.eos_token_id]

    class Recording(ScriptedEngine):
        def generate(self, prompts, sampling):
            self.seen = getattr(self, "seen", []) + [list(prompts.multi_modal)]
            return super().generate(prompts, sampling)

    engine = Recording(tok, [[call], [done]])
    mt = _rollout(tok, engine, tmp_path, tool_config=_write(tmp_path, "t.yaml", GSM8K_YAML))
    prompts, prompt_ids = _prompts(tok, ["look"])
    image = Image.new("RGB", (8, 8))
    prompts.multi_modal = [MultiModalInputs(images=(image,), engine_prompt_ids=(7, 8, 9))]
    out = mt.generate(prompts, SamplingParams(max_new_tokens=64))
    first, second = engine.seen[0][0], engine.seen[1][0]
    assert first.engine_prompt_ids == (7, 8, 9) and first.images == (image,)
    turn = engine.contexts[1][0][len(prompt_ids[0]):]  # the ids after the prompt in the second context
    assert second.images == (image,) and second.engine_prompt_ids == (7, 8, 9) + tuple(turn)
    assert turn[: len(call)] == call and out.multi_modal[0] is prompts.multi_modal[0]  # the batch keeps the prompt's


HANGING = '''
import asyncio

from verl.interactions.base import BaseInteraction


class Hangs(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        await asyncio.sleep(3600)
'''


def test_an_interaction_that_hangs_ends_its_trajectory_at_the_timeout(qwen_tok, tmp_path):
    import time

    tok = qwen_tok
    path = _write(tmp_path, "hangs.py", HANGING)
    cfg = _write(tmp_path, "i.yaml", f"interaction:\n  - name: h\n    class_name: \"{path}:Hangs\"\n")
    engine = ScriptedEngine(tok, [[_enc(tok, "#### 1") + [tok.eos_token_id]]])
    mt = MultiTurnRollout(engine, tok, RolloutConfig(interaction_config=cfg), chat=True,
                          environment=interaction_environment(cfg, timeout_s=0.5))
    prompts, _ = _prompts(tok, ["q"])
    prompts.extra = [{"interaction_kwargs": {"name": "h"}}]
    start = time.monotonic()
    out = mt.generate(prompts, SamplingParams(max_new_tokens=16))
    assert time.monotonic() - start < 30
    last = out.extra[0]["turns"][-1]
    assert last["role"] == "environment" and last["ok"] is False and "TimeoutError" in last["text"]


COUNTED = '''
from verl.interactions.base import BaseInteraction
from verl.tools.base_tool import BaseTool

BUILT = []


class CountedTool(BaseTool):
    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        BUILT.append("tool")


class CountedInteraction(BaseInteraction):
    def __init__(self, config):
        super().__init__(config)
        BUILT.append("interaction")
'''


def test_a_trainer_builds_its_tool_and_interaction_classes_once(tmp_path, tiny_qwen2):
    """The tool and interaction objects the trainer loads (before any model, so a bad file fails in seconds)
    are those the rollout calls: a real verl class's constructor (which may open a pool or a connection)
    runs once per run, not once for the check and again for the engine."""
    from conftest import small_overrides
    from verl import create_trainer, load_config
    from verl.agents.tools import _FILE_MODULES

    path = _write(tmp_path, "counted.py", COUNTED)
    tools = _write(tmp_path, "tools.yaml", f"""
        tools:
          - class_name: "{path}:CountedTool"
            config: {{type: native}}
            tool_schema:
              type: function
              function: {{name: noop, description: does nothing, parameters: {{type: object, properties: {{}}}}}}
        """)
    interactions = _write(tmp_path, "interactions.yaml", f"""
        interaction:
          - name: counted
            class_name: "{path}:CountedInteraction"
            config: {{}}
        """)
    cfg = load_config(None, small_overrides(tmp_path, **{"model.name": tiny_qwen2, "rollout.name": "hf",
                                                         "rollout.tool_config": tools,
                                                         "rollout.interaction_config": interactions}))
    with create_trainer(cfg) as trainer:
        built = next(m for p, m in _FILE_MODULES.items() if p.endswith("counted.py")).BUILT
        assert sorted(built) == ["interaction", "tool"]
        assert isinstance(trainer.rollout_engine, MultiTurnRollout)
        assert trainer.rollout_engine.runner.tools["noop"] is trainer.agent_parts.tools[0]

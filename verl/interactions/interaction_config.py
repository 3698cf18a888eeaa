"""An interaction YAML of real verl's layout -> an environment factory for the multi-turn rollout.

    interaction:
      - name: gsm8k                                     # rows pick it by extra_info.interaction_kwargs.name
        class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction   # or path/to/file.py:Class
        config: {}

Each entry's class is made once, `cls(config)` (with `name` added to config, as real verl does).
`interaction_environment(path)` returns a factory of `InteractionEnvironment`s, one per trajectory
(rollout.environment's contract, verl/agents/environment.py), which run real verl's lifecycle:

    reset(sample):     start_interaction(request_id, **interaction_kwargs), the row's
                       extra_info.interaction_kwargs; its `name` picks the interaction (a row without
                       one, or naming none of the file's, fails its trajectory, as real verl raises)
    step(turn_text):   generate_response(request_id, messages, **interaction_kwargs) ->
                       (done, user_text, turn_score, extra): user_text is the next user turn,
                       turn_score the step reward, done ends the trajectory
    close():           finalize_interaction(request_id)

Each call is bounded by rollout.multi_turn.tool_timeout_s: an interaction that hangs ends its trajectory.

`messages` is the trajectory's conversation as the rollout keeps it (sample["messages"]: the row's
prompt messages, then the model's and the answers' turns). The rollout asks the environment only
after a model turn that makes no tool call, as real verl's loop does.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from uuid import uuid4

from verl.agents.environment import Environment, StepResult
from verl.errors import ConfigError
from verl.tools.tool_config import import_class, read_yaml_list


def load_interactions(path: str, key: str = "rollout.interaction_config") -> dict:
    """{name: interaction object} from real verl's interaction YAML; ConfigError naming key and entry."""
    found = {}
    for i, entry in enumerate(read_yaml_list(path, key, "interaction")):
        where = f"{key} ('{path}', interaction[{i}])"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with name, class_name and config")
        cls = import_class(entry.get("class_name"), where)
        config = dict(entry.get("config") or {})
        name = str(entry.get("name") or config.get("name") or cls.__name__)
        if name in found:
            raise ConfigError(f"{where}: a second interaction named '{name}'")
        config["name"] = name
        try:
            found[name] = cls(config)
        except Exception as exc:  # the user's class: any failure to build it is this entry's fault
            raise ConfigError(f"{where}: building {cls.__name__} failed: {type(exc).__name__}: {exc}") from None
    return found


def _run(value, timeout_s: float):
    """An interaction method's result: a coroutine is run in the rollout's thread for at most `timeout_s`
    (then asyncio's TimeoutError, which ends the trajectory with that error, as any failing step does)."""
    if not inspect.isawaitable(value):
        return value

    async def bounded():
        return await asyncio.wait_for(value, timeout_s)

    return asyncio.run(bounded())


class InteractionEnvironment(Environment):
    def __init__(self, interactions: dict, timeout_s: float = 10.0):
        self.interactions, self.timeout_s = interactions, timeout_s
        self.interaction = None
        self.kwargs: dict = {}
        self.request_id = uuid4().hex
        self.messages: list = []

    def reset(self, sample: dict) -> str:
        kwargs = sample.get("interaction_kwargs")
        if not isinstance(kwargs, dict) or "name" not in kwargs:
            raise ValueError("the row's extra_info.interaction_kwargs needs a 'name' (one of: "
                             f"{', '.join(self.interactions)})")
        if kwargs["name"] not in self.interactions:
            raise ValueError(f"interaction {kwargs['name']!r} is not in the interaction file (there: "
                             f"{', '.join(self.interactions)})")
        self.interaction, self.kwargs = self.interactions[kwargs["name"]], dict(kwargs)
        self.messages = sample.get("messages") if isinstance(sample.get("messages"), list) else []
        _run(self.interaction.start_interaction(self.request_id, **self.kwargs), self.timeout_s)
        return ""

    def step(self, action_text: str) -> StepResult:
        done, text, score, extra = _run(self.interaction.generate_response(self.request_id, self.messages,
                                                                           **self.kwargs), self.timeout_s)
        return StepResult(observation=str(text), reward=0.0 if score is None else float(score), done=bool(done),
                          info=extra if isinstance(extra, dict) else {})

    def close(self) -> None:
        if self.interaction is not None:
            finalize = self.interaction.finalize_interaction
            _run(finalize(self.request_id) if inspect.signature(finalize).parameters else finalize(), self.timeout_s)


def interaction_environment(path: str, key: str = "rollout.interaction_config", timeout_s: float = 10.0):
    """A no-argument factory of InteractionEnvironments over the file's interactions (loaded once), each call
    bounded by `timeout_s` (rollout.multi_turn.tool_timeout_s)."""
    return functools.partial(InteractionEnvironment, load_interactions(path, key), timeout_s)

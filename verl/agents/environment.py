"""Environments: task state that lives outside the text (a game, a repository, a web page).

One instance per trajectory, made with no arguments (`cls()`). The rollout calls

    observation = env.reset(sample)   # sample: the data row (prompt, answer, ...); text added to
                                      # the first turn, "" for none
    result = env.step(action_text)    # the model's turn text -> StepResult

after every model turn, appends `result.observation` to the conversation as the next turn (masked
out of the loss, like a tool result), and stops the trajectory when `result.done`. `reward` adds
to the trajectory's reward (with or instead of the reward functions, as the config says); `info`
is free-form (kept for the report). `close()` is called when the trajectory ends.

`rollout.environment: "package.module:Class"` or `"path/to/file.py:Class"`; `load_environment`
imports it and checks that it is an Environment subclass that takes no arguments.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Union

from verl.agents.tools import load_object
from verl.errors import ConfigError


@dataclass
class StepResult:
    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict = field(default_factory=dict)


class Environment:
    """Subclass and override `step` (and `reset`, if the task has state to set up)."""

    def reset(self, sample: dict) -> str:
        """Start a trajectory for `sample`; the text returned is shown to the model before its first
        turn ("" for nothing)."""
        return ""

    def step(self, action_text: str) -> StepResult:
        """React to the model's turn."""
        raise NotImplementedError(f"{type(self).__name__}.step")

    def close(self) -> None:
        """The trajectory is over (release what reset acquired)."""


def as_step_result(value) -> StepResult:
    """`value` as a StepResult: a StepResult, a gym-style (observation, reward, done[, info]) tuple
    or a bare observation string; a TypeError saying what came back otherwise."""
    if isinstance(value, StepResult):
        result = value
    elif isinstance(value, str):
        result = StepResult(observation=value)
    elif isinstance(value, tuple) and len(value) in (3, 4):
        info = value[3] if len(value) == 4 else {}
        result = StepResult(observation=value[0], reward=value[1], done=value[2], info=info)
    else:
        raise TypeError(f"step() must return a StepResult, an (observation, reward, done[, info]) tuple or a "
                        f"string, got {type(value).__name__}")
    if not isinstance(result.observation, str):
        raise TypeError(f"the observation must be a string, got {type(result.observation).__name__}")
    try:
        reward = float(result.reward)
    except (TypeError, ValueError):
        raise TypeError(f"the reward must be a number, got {result.reward!r}") from None
    info = result.info if isinstance(result.info, dict) else {"info": result.info}
    return StepResult(observation=result.observation, reward=reward, done=bool(result.done), info=info)


def load_environment(spec: Union[str, type], key: str = "rollout.environment") -> type[Environment]:
    """The Environment subclass `spec` names ('module:Class' or 'file.py:Class', or the class)."""
    cls = spec if isinstance(spec, type) else load_object(spec, key, "Class")
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        what = f"the class {cls.__name__}" if isinstance(cls, type) else f"a {type(cls).__name__}"
        raise ConfigError(f"{key}: {spec!r} is {what}, not a subclass of verl.agents.Environment")
    try:
        inspect.signature(cls).bind()
    except TypeError as exc:
        raise ConfigError(f"{key}: {cls.__name__} must be constructible with no arguments (one is made per "
                          f"trajectory): {exc}") from None
    except ValueError:
        pass
    return cls


class GuessNumberEnv(Environment):
    """Guess the integer in `sample["answer"]` (or "ground_truth"): each turn's last integer is the
    guess, answered "higher", "lower" or "correct" (reward 1.0, done)."""

    def __init__(self) -> None:
        self.target = None
        self.guesses = 0

    def reset(self, sample: dict) -> str:
        answer = sample.get("answer", sample.get("ground_truth", (sample.get("extra") or {}).get("answer")))
        self.target, self.guesses = int(str(answer).strip()), 0
        return ""

    def step(self, action_text: str) -> StepResult:
        numbers = re.findall(r"-?\d+", action_text)
        if not numbers:
            return StepResult("Reply with an integer.", info={"guess": None})
        guess = int(numbers[-1])
        self.guesses += 1
        info = {"guess": guess, "guesses": self.guesses}
        if guess == self.target:
            return StepResult("correct", reward=1.0, done=True, info=info)
        return StepResult("higher" if guess < self.target else "lower", info=info)

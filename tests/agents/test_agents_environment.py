"""Environments (verl.agents.environment): the example GuessNumberEnv, loading an environment class from
the config (each wrong spec one ConfigError naming the key), and a step's return value normalised."""

from __future__ import annotations

import pytest

from verl.agents.environment import Environment, GuessNumberEnv, StepResult, as_step_result, load_environment
from verl.errors import ConfigError


def test_guess_number_env():
    env = GuessNumberEnv()
    assert env.reset({"prompt": "Guess", "answer": "42"}) == ""
    assert env.step("I guess 10") == StepResult("higher", 0.0, False, {"guess": 10, "guesses": 1})
    assert env.step("Maybe 50?").observation == "lower"
    bad = env.step("no idea")
    assert bad.observation == "Reply with an integer." and not bad.done
    final = env.step("It is 7... no, 42")
    assert (final.observation, final.reward, final.done, final.info["guesses"]) == ("correct", 1.0, True, 3)
    assert GuessNumberEnv().reset({"ground_truth": 5}) == ""


def test_load_environment(tmp_path):
    assert load_environment("verl.agents.environment:GuessNumberEnv") is GuessNumberEnv
    assert load_environment(GuessNumberEnv) is GuessNumberEnv
    path = tmp_path / "envs.py"
    path.write_text("from verl.agents import Environment, StepResult\n\n"
                    "class Echo(Environment):\n    def step(self, action_text):\n"
                    "        return StepResult(action_text)\n\n"
                    "class NeedsArgs(Environment):\n    def __init__(self, size):\n        self.size = size\n\n"
                    "class NotAnEnv:\n    pass\n\nvalue = 3\n")
    echo = load_environment(f"{path}:Echo")
    assert issubclass(echo, Environment) and echo().step("hi").observation == "hi"
    assert echo().reset({}) == ""
    with pytest.raises(ConfigError, match=r"rollout.environment: .* is the class NotAnEnv, not a subclass"):
        load_environment(f"{path}:NotAnEnv")
    with pytest.raises(ConfigError, match=r"is a int, not a subclass"):
        load_environment(f"{path}:value")
    with pytest.raises(ConfigError, match=r"NeedsArgs must be constructible with no arguments"):
        load_environment(f"{path}:NeedsArgs")
    with pytest.raises(ConfigError, match=r"^env: .*has no Class 'Missing'"):
        load_environment(f"{path}:Missing", key="env")
    with pytest.raises(ConfigError, match=r"rollout.environment: 'GuessNumberEnv' must look like"):
        load_environment("GuessNumberEnv")
    with pytest.raises(NotImplementedError):
        Environment().step("x")


def test_as_step_result():
    assert as_step_result(("obs", 1, True)) == StepResult("obs", 1.0, True, {})
    assert as_step_result(("obs", 0.5, 0, {"k": 1})) == StepResult("obs", 0.5, False, {"k": 1})
    assert as_step_result("just text") == StepResult("just text")
    with pytest.raises(TypeError, match="must return a StepResult"):
        as_step_result(None)
    with pytest.raises(TypeError, match="reward must be a number"):
        as_step_result(StepResult("o", reward="high"))
    with pytest.raises(TypeError, match="observation must be a string"):
        as_step_result(StepResult(3))

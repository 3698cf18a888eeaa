"""Multi-turn rollouts: the model acts, tools or an environment answer, the model goes on.

    engine = MultiTurnRollout(inner_engine, tokenizer, config.rollout, chat=True, tools=..., environment=...)
    batch = engine.generate(prompts, sampling)    # the Batch layout of every engine, see below

Each of the B * n trajectories is kept as token ids from start to end:

    prompt | model turn 1 | tool turn 1 | model turn 2 | ... | model turn K
             mask 1          mask 0       mask 1               mask 1

Model turns are appended exactly as the engine sampled them (ids and engine log-probs, never
decoded and re-encoded); tool results and environment observations are tokenized once with
the chat template's turn delimiters (verl/rollout/turn_template.py) and carry response_mask 0
and log-prob 0, so they never enter a loss (nor do end-of-turn tokens the engine did not sample,
appended after a turn that stopped on a stop string). A chat template that re-renders earlier
turns (Qwen3, DeepSeek-R1) is named in one line when the rollout is built; the trajectory keeps
the tokens the model saw (docs/agents.md, "Chat templates"). A prompt's images stay with its trajectory: each
later context holds them (the engine's unexpanded prompt ids carry the turns after them; later turns are
text). Every turn's generation for all live trajectories
is one batched call of the inner engine (the HF, vLLM or SGLang backend, n = 1 per row); the tool
calls of a turn run concurrently in one bounded pool (verl.agents.ToolRunner); finished trajectories
drop out. With `multi_turn.turn_barrier: false` a turn does not wait for every trajectory's tools:
each engine call takes the trajectories whose tools have answered, so a slow tool delays only its
own trajectory (the batch composition then depends on timing). A trajectory ends when a model turn makes no tool call (its final answer), the
environment says done, `multi_turn.max_turns` model turns were taken, or
`multi_turn.max_total_tokens` response tokens are used up (then `truncated`). With both tools and
an environment (or real verl's interaction, verl/interactions/), a turn that calls a tool gets the
tools' answers and a turn that calls none goes to the environment, as real verl's loop does. A row
of the single-turn agent loop (`agent_name`, verl/agents/agent_loops.py) ends after one model turn.

Each trajectory keeps its conversation in chat form (`ToolContext.messages`: the row's prompt
messages, then {"role": "assistant" | "tool" | "user", "content": text} per turn) for the tools
that take a context (real verl's tool classes) and for interactions.

Per sample, `extra` gains: "turns" (role, text, and for tools name/ok, per turn, in order),
"turn_spans" ([start, end) response positions and role of each turn), "num_turns",
"num_tool_calls", "tool_errors", "tool_rewards" (the step rewards tools gave, in order) and, with an
environment, "env_reward" (the sum of its step rewards; the `environment` reward type scores it).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Optional

import torch

from verl.agents.agent_loops import MULTI_TURN, row_agent
from verl.agents.environment import as_step_result
from verl.agents.parsing import parse_tool_calls
from verl.agents.tools import ToolContext, ToolRunner
from verl.batch import Batch
from verl.errors import ConfigError
from verl.rollout.base import RolloutEngine, SamplingParams
from verl.rollout.token_io import left_padded, pad_id
from verl.rollout.turn_template import TurnTemplate

logger = logging.getLogger(__name__)

# What ends a model turn that calls a tool, per call format (the stop text stays in the turn).
CALL_END = {"hermes": "</tool_call>"}


@dataclass
class Trajectory:
    row: int  # index into the repeated prompt rows
    ids: list = field(default_factory=list)  # response token ids so far
    mask: list = field(default_factory=list)  # 1 on model tokens, 0 on tool / environment tokens
    logp: list = field(default_factory=list)  # engine log-probs (0 on masked tokens)
    turns: list = field(default_factory=list)  # {"role", "text", ...} in order
    spans: list = field(default_factory=list)  # [start, end, role]
    model_turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0  # failed calls + malformed / over-limit calls
    malformed: int = 0  # calls that could not be run (broken format, over the limit)
    env_calls: int = 0  # environment reset() + step() calls
    env_errors: int = 0  # of those, the ones that raised or returned something unusable
    env_reward: float = 0.0
    pending_text: str = ""  # the last model turn's text, for the tool parser / the environment
    last_cut: bool = False  # the last model turn stopped on its token budget
    env: object = None
    context: Optional[ToolContext] = None  # the conversation and the row, for contextual tools / interactions
    tool_rewards: list = field(default_factory=list)  # step rewards the tools gave
    single: bool = False  # a row of the single-turn agent loop: one model turn
    done: bool = False
    truncated: bool = False

    def append(self, ids, role: str, logp=None) -> None:
        start = len(self.ids)
        self.ids += list(ids)
        self.mask += [1.0 if role == "assistant" else 0.0] * len(ids)
        self.logp += list(logp) if logp is not None else [0.0] * len(ids)
        self.spans.append([start, len(self.ids), role])


class MultiTurnRollout(RolloutEngine):
    def __init__(self, engine: RolloutEngine, tokenizer, rollout_cfg, chat: bool, tools=(), environment=None,
                 template_kwargs: Optional[dict] = None):
        self.engine = engine
        self.tokenizer = tokenizer
        self.cfg = rollout_cfg.multi_turn
        self.turns = TurnTemplate(tokenizer, chat, template_kwargs)  # data.chat_template_kwargs, as the prompt's
        self.environment_cls = environment
        self.runner = ToolRunner(list(tools), timeout_s=self.cfg.tool_timeout_s, max_workers=self.cfg.tool_workers,
                                 max_output_chars=self.cfg.max_tool_output_chars,
                                 keep=self.cfg.tool_output_keep) if tools else None
        self._metrics: dict = {}

    # The inner engine's weights are the actor's: sync, sleep and wake pass through.
    def sync_weights(self, model) -> dict:
        return self.engine.sync_weights(model)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def unbacked_bytes(self) -> int:
        return self.engine.unbacked_bytes()

    def can_sleep(self) -> bool:
        return self.engine.can_sleep()

    def load_state_dict(self, state: dict) -> None:
        self.engine.load_state_dict(state)

    def metrics(self) -> dict:
        return dict(self._metrics)

    # ------------------------------------------------------------------ rollout
    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        rows = prompts.repeat(sampling.n)
        trajs = [self._trajectory(rows, i) for i in range(len(rows))]
        try:
            return self._generate(rows, trajs, sampling)
        finally:
            self._close_environments(trajs)

    def _trajectory(self, rows: Batch, i: int) -> Trajectory:
        """Trajectory `i`: its agent loop and its context (conversation seeded with the row's prompt)."""
        extra = rows.extra[i] if rows.extra else {}
        t = Trajectory(row=i, single=row_agent(extra, self.cfg.default_agent) != MULTI_TURN)
        prompt = rows.raw_prompt[i] if rows.raw_prompt else (rows.prompt_text[i] if rows.prompt_text else "")
        messages = [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        t.context = ToolContext(request_id=uuid.uuid4().hex, sample=_sample_of(rows, i), messages=messages,
                                tools_kwargs=dict(extra.get("tools_kwargs") or {}),
                                interaction_kwargs=dict(extra.get("interaction_kwargs") or {}))
        t.context.sample["messages"] = t.context.messages
        return t

    def _generate(self, rows: Batch, trajs: list, sampling: SamplingParams) -> Batch:
        if self.environment_cls is not None:
            self._reset_environments(rows, [t for t in trajs if not t.single])
        turn_sampling = copy.copy(sampling)
        turn_sampling.n = 1
        turn_sampling.log_probs = True  # each trajectory carries its turns' engine log-probs, whoever asks
        end = CALL_END.get(self.cfg.tool_format)
        if self.runner is not None and self.cfg.stop_at_tool_call and end and end not in sampling.stop:
            turn_sampling.stop = list(sampling.stop) + [end]
        latencies, per_tool = [], Counter()
        if self.runner is not None and self.environment_cls is None and not self.cfg.turn_barrier:
            self._run_without_barrier(rows, trajs, turn_sampling, sampling.max_new_tokens, latencies, per_tool)
        for _ in range(self.cfg.max_turns):
            live = [t for t in trajs if not t.done]
            if not live:
                break
            self._model_turn(rows, live, turn_sampling, sampling.max_new_tokens)
            self._answer_turn([t for t in live if not t.done], latencies, per_tool)
        for t in trajs:
            t.done = True
        batch = self._assemble(rows, trajs)
        self._metrics = self._summarize(trajs, latencies, per_tool)
        return batch

    @staticmethod
    def _close_environments(trajs: list) -> None:
        """Environment.close() of every trajectory's environment (one that raises is logged, not fatal)."""
        for t in trajs:
            if t.env is None:
                continue
            try:
                t.env.close()
            except Exception as exc:  # noqa: BLE001 - the rollout is over; a failing close loses nothing
                logger.warning("verl: rollout environment close() raised: %s: %s", type(exc).__name__, exc)
            t.env = None

    def _reset_environments(self, rows: Batch, trajs: list) -> None:
        """A fresh environment per trajectory and its first observation. One whose reset() raises ends
        its own trajectory before any model turn (an empty response, no loss), with a warning line; when
        every reset() raised the environment is broken, and training on empty responses would only hide
        it: one line naming rollout.environment and the first error (exit 2)."""
        failed = []
        for t in trajs:
            t.env = self.environment_cls()
            sample = t.context.sample
            t.env_calls += 1
            try:
                first = t.env.reset(sample)
            except Exception as exc:  # noqa: BLE001 - an environment that raises ends its own trajectory only
                t.turns.append({"role": "environment", "text": f"error: {type(exc).__name__}: {exc}", "ok": False})
                t.done = True
                t.env_errors += 1
                failed.append(f"{type(exc).__name__}: {exc}")
                continue
            if first:
                self._append_answer(t, self.turns.observation_turn(first), "environment", first)
        if failed and len(failed) == len(trajs):
            raise ConfigError(f"rollout.environment: reset() raised for all {len(trajs)} trajectories of the batch "
                              f"(first: {failed[0][:200]}); nothing could be generated")
        if failed:
            logger.warning("verl: rollout.environment: reset() raised for %d of %d trajectories (first: %s); they end "
                           "without a model turn", len(failed), len(trajs), failed[0][:200])

    def _model_turn(self, rows: Batch, live: list, sampling: SamplingParams, per_turn: int) -> None:
        """One batched engine call: the next model turn of every live trajectory."""
        # One cap for the call (the engines take one): the most any live trajectory has room for; a
        # trajectory with less keeps the prefix that fits (still the sampled ids) and ends there.
        step = copy.copy(sampling)
        step.max_new_tokens = max(1, min(per_turn, max(self.cfg.max_total_tokens - len(t.ids) for t in live)))
        out = self.engine.generate(_contexts(rows, live, self.tokenizer), step)
        eos = self.tokenizer.eos_token_id
        for k, t in enumerate(live):
            n = min(int(out.response_mask[k].sum()), self.cfg.max_total_tokens - len(t.ids))
            ids = out.responses[k, :n].tolist()
            logp = out.rollout_log_probs[k, :n].tolist()
            t.append(ids, "assistant", logp)
            t.model_turns += 1
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            t.turns.append({"role": "assistant", "text": text})
            t.context.messages.append({"role": "assistant", "content": text})
            t.last_cut = bool(out.truncated[k]) or (n >= step.max_new_tokens and (not ids or ids[-1] != eos))
            if len(t.ids) >= self.cfg.max_total_tokens:
                t.done = t.truncated = True
            elif t.single:
                t.done, t.truncated = True, t.last_cut
            t.pending_text = text

    def _answer_turn(self, live: list, latencies: list, per_tool: Counter) -> None:
        """Tool results (all calls of this turn, concurrently) and environment observations: with tools, a
        turn that calls one gets the tools' answers; a turn without a call goes to the environment."""
        env = self.environment_cls is not None
        if self.runner is None:
            for t in live:
                self._environment_step(t)
            return
        calls, owners, notes, to_env = [], [], {}, []
        for t in live:
            mine, notes[id(t)] = self._calls_of(t, final_without_call=not env)
            if env and not mine and not notes[id(t)]:
                to_env.append(t)
            calls += mine
            owners += [t] * len(mine)
        for t in to_env:
            self._environment_step(t)
        results = self.runner.run(calls, [t.context for t in owners]) if calls else []
        answers: dict = defaultdict(list)
        for call, t, res in zip(calls, owners, results):
            answers[id(t)].append((call, res))
        for t in live:
            if not t.done:
                self._deliver(t, answers[id(t)], notes[id(t)], latencies, per_tool)

    def _calls_of(self, t: Trajectory, final_without_call: bool = True) -> tuple[list, list]:
        """The tool calls of `t`'s last model turn to run, and the error notes for those that cannot
        run; a turn without any call is the final answer (t.done set) unless `final_without_call` is
        false (an environment answers it). Calls past multi_turn.max_calls_per_turn are not run."""
        parsed = parse_tool_calls(t.pending_text, self.cfg.tool_format, self.cfg.tool_call_pattern)
        if not parsed.calls and not parsed.errors:
            if final_without_call:
                t.done, t.truncated = True, t.last_cut  # no call: the final answer (cut if it ran out of tokens)
            return [], []
        if self.cfg.max_calls_per_turn is not None:
            parsed.calls = parsed.calls[: self.cfg.max_calls_per_turn]
        calls, notes = [], []
        for err in parsed.errors:
            notes.append(err if err.startswith("error") else f"error: {err}")
            t.tool_errors += 1
            t.malformed += 1
        for call in parsed.calls:
            if t.tool_calls >= self.cfg.max_tool_calls:
                notes.append(f"error: tool-call limit reached ({self.cfg.max_tool_calls} per trajectory)")
                t.tool_errors += 1
                t.malformed += 1
                continue
            t.tool_calls += 1
            calls.append(call)
        return calls, notes

    def _deliver(self, t: Trajectory, answered: list, notes: list, latencies: list, per_tool: Counter) -> None:
        """(call, result) pairs and notes of `t`'s turn into its trajectory as one tool turn."""
        for c, r in answered:
            latencies.append(r.seconds)
            per_tool[c.name] += 1
            t.tool_errors += not r.ok
            if r.reward is not None:
                t.tool_rewards.append(r.reward)
            t.turns.append({"role": "tool", "name": c.name, "text": r.text, "ok": r.ok})
        for note in notes:
            t.turns.append({"role": "tool", "name": None, "text": note, "ok": False})
        t.context.messages.extend({"role": "tool", "content": r.text} for _, r in answered)
        t.context.messages.extend({"role": "tool", "content": note} for note in notes)
        if t.model_turns >= self.cfg.max_turns:
            t.done = True  # the last model turn gets no answer
            return
        texts = [r.text for _, r in answered] + list(notes)
        ids = self.turns.close_assistant(t.ids) + self.turns.tool_turn(texts)
        self._append_answer(t, ids, "tool", None)

    def _run_without_barrier(self, rows: Batch, trajs: list, sampling: SamplingParams, per_turn: int,
                             latencies: list, per_tool: Counter) -> None:
        """multi_turn.turn_barrier: false. Each engine call takes the trajectories ready for a model
        turn; their tool calls run in the background (one ToolRunner.run per trajectory, each call
        under tool_timeout_s), and a trajectory whose tools have answered joins the next call. The
        engine waits only when nothing is ready, for the first trajectory whose tools finish."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        ready, pending = [t for t in trajs if not t.done], {}
        pool = ThreadPoolExecutor(max_workers=self.cfg.tool_workers, thread_name_prefix="verl-tool-turn")
        try:
            while ready or pending:
                if ready:
                    self._model_turn(rows, ready, sampling, per_turn)
                    for t in ready:
                        if t.done:
                            continue
                        calls, notes = self._calls_of(t)
                        if calls:
                            pending[pool.submit(self.runner.run, calls, [t.context] * len(calls))] = (t, calls, notes)
                        elif not t.done:  # only notes (broken calls): answered at once
                            self._deliver(t, [], notes, latencies, per_tool)
                    ready = [t for t in ready if not t.done and not any(o is t for o, _, _ in pending.values())]
                if pending and not ready:
                    # ToolRunner.run answers each call within tool_timeout_s (a slow call becomes an error), at
                    # most tool_workers at a time: a trajectory's calls take at most this long.
                    bound = self.cfg.tool_timeout_s * (self.cfg.max_tool_calls + 1) + 30.0
                    finished, _ = wait(list(pending), timeout=bound, return_when=FIRST_COMPLETED)
                    if not finished:
                        raise RuntimeError(f"no trajectory's tool calls returned within {bound:g} s "
                                           "(rollout.multi_turn.tool_timeout_s x (max_tool_calls + 1) + 30 s)")
                    for future in finished:
                        t, calls, notes = pending.pop(future)
                        self._deliver(t, list(zip(calls, future.result())), notes, latencies, per_tool)
                        if not t.done:
                            ready.append(t)
                    ready.sort(key=lambda t: t.row)  # a deterministic order inside each engine call
        finally:
            pool.shutdown(wait=False)

    def _environment_step(self, t: Trajectory) -> None:
        t.env_calls += 1
        try:
            result = as_step_result(t.env.step(t.pending_text))
            reward = float(result.reward)
        except Exception as exc:  # noqa: BLE001 - contained in its trajectory (raises, or returns junk)
            t.turns.append({"role": "environment", "text": f"error: {type(exc).__name__}: {exc}", "ok": False})
            t.env_errors += 1
            t.done = True
            return
        t.env_reward += reward
        t.turns.append({"role": "environment", "text": result.observation, "reward": reward})
        t.context.messages.append({"role": "user", "content": result.observation})
        if result.done or t.model_turns >= self.cfg.max_turns:
            t.done = True
            return
        ids = self.turns.close_assistant(t.ids) + self.turns.observation_turn(result.observation)
        self._append_answer(t, ids, "environment", None)

    def _append_answer(self, t: Trajectory, ids: list, role: str, text) -> None:
        room = self.cfg.max_total_tokens - len(t.ids)
        if len(ids) >= room:  # no room left for the model to answer it: the trajectory ends here
            t.done = t.truncated = True
            return
        t.append(ids, role)
        if text is not None:
            t.turns.append({"role": role, "text": text})

    # ------------------------------------------------------------------ output
    def _assemble(self, rows: Batch, trajs: list) -> Batch:
        """The verl.batch layout: prompt block of `rows`, then each trajectory right-padded."""
        tok = self.tokenizer
        pad = pad_id(tok)
        width = max(1, max(len(t.ids) for t in trajs))
        n = len(trajs)
        resp = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.float32)
        logp = torch.zeros((n, width), dtype=torch.float32)
        real = torch.zeros((n, width), dtype=torch.long)
        for i, t in enumerate(trajs):
            k = len(t.ids)
            if k:
                resp[i, :k] = torch.tensor(t.ids, dtype=torch.long)
                mask[i, :k] = torch.tensor(t.mask)
                logp[i, :k] = torch.tensor(t.logp)
                real[i, :k] = 1
        input_ids = torch.cat([rows.input_ids.cpu(), resp], dim=1)
        attention_mask = torch.cat([rows.attention_mask.cpu(), real], dim=1)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0) * attention_mask
        extra = []
        for i, t in enumerate(trajs):
            e = dict(rows.extra[i]) if rows.extra else {}
            e.update(turns=t.turns, turn_spans=t.spans, num_turns=t.model_turns, num_tool_calls=t.tool_calls,
                     tool_errors=t.tool_errors, tool_rewards=list(t.tool_rewards))
            if self.environment_cls is not None:
                e["env_reward"] = t.env_reward
            extra.append(e)
        texts = tok.batch_decode([t.ids for t in trajs], skip_special_tokens=True)
        return rows.replace(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            responses=resp, response_mask=mask, rollout_log_probs=logp, response_text=texts,
                            truncated=[t.truncated for t in trajs], extra=extra)

    def _summarize(self, trajs: list, latencies: list, per_tool: Counter) -> dict:
        n = max(1, len(trajs))
        tokens = sum(len(t.ids) for t in trajs)
        masked = sum(len(t.ids) - int(sum(t.mask)) for t in trajs)
        calls = sum(t.tool_calls for t in trajs)
        m = {
            "agent/turns_per_trajectory": sum(t.model_turns for t in trajs) / n,
            "agent/tool_calls_per_trajectory": calls / n,
            # failed or malformed calls / all attempted calls (0 when none was attempted)
            "agent/tool_error_rate": sum(t.tool_errors for t in trajs) / max(1, calls + sum(t.malformed for t in trajs)),
            "agent/masked_token_share": masked / max(1, tokens),
            "agent/trajectories_with_tool_call": sum(t.tool_calls > 0 for t in trajs) / n,
        }
        if latencies:
            m["agent/tool_latency_s_mean"] = sum(latencies) / len(latencies)
            m["agent/tool_latency_s_max"] = max(latencies)
        for name, count in per_tool.items():
            m[f"agent/tool_calls/{name}"] = count / n
        rewards = [r for t in trajs for r in t.tool_rewards]
        if rewards:
            m["agent/tool_reward_mean"] = sum(rewards) / len(rewards)
        if self.environment_cls is not None:
            m["agent/env_reward_mean"] = sum(t.env_reward for t in trajs) / n
            # reset() and step() calls that raised / all of them (a rate in [0, 1])
            m["agent/env_error_rate"] = sum(t.env_errors for t in trajs) / max(1, sum(t.env_calls for t in trajs))
        return m


def _sample_of(rows: Batch, i: int) -> dict:
    """The data row an environment's reset() sees: prompt text, answer and the row's extra fields."""
    sample = dict(rows.extra[i]) if rows.extra else {}
    sample.update(prompt=rows.prompt_text[i] if rows.prompt_text else None,
                  answer=rows.ground_truth[i] if rows.ground_truth else None)
    return sample


def _contexts(rows: Batch, live: list, tokenizer) -> Batch:
    """The live trajectories' whole contexts (prompt + turns so far), left-padded, as a prompt Batch."""
    seqs = []
    for t in live:
        prompt = rows.input_ids[t.row][rows.attention_mask[t.row] > 0].tolist()
        seqs.append(prompt + t.ids)
    ids, att = left_padded(seqs, pad_id(tokenizer))
    pick = [t.row for t in live]
    sub = rows.select(pick)
    if sub.multi_modal:  # a row with images: the engine's unexpanded prompt ids go on with the turns too
        sub = sub.replace(multi_modal=[mm if mm is None else dataclasses.replace(
            mm, engine_prompt_ids=tuple(mm.engine_prompt_ids) + tuple(t.ids)) for mm, t in zip(sub.multi_modal, live)])
    return sub.replace(input_ids=ids, attention_mask=att, position_ids=None)

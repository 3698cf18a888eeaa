"""Token ids of the turns the model does not write (tool results, environment observations),
with the chat template's own turn delimiters, each tokenized once and appended as is.

    turns = TurnTemplate(tokenizer, chat=True)
    ids = turns.close_assistant(generated_ids)       # the end-of-turn tokens a stopped turn lacks
    ids += turns.tool_turn(["579"])                   # <|im_start|>user\n<tool_response>...  <|im_start|>assistant\n
    ids += turns.observation_turn("higher")           # an environment's answer, as a user turn

The model's own tokens are never decoded and re-encoded: what the engine sampled is what the
actor scores. The delimiters of a turn are what the template renders after a probe assistant
turn and its end-of-turn tokens when the turn is appended (with the assistant's generation
prompt), so a template that renders the last assistant turn differently from earlier ones
(Qwen3: an empty <think></think> on the last one only) still gives the right delimiters. A
template without a tool role (Gemma, Mistral without call ids) gets the results as one user turn,
"<tool_response>\n...\n</tool_response>" each (`tool_messages` says which). A tokenizer without a
chat template gets plain markers ("\n<tool_response>\n...\n</tool_response>\n").

Incremental or not: at construction a probe conversation (user, assistant, tool or user answer,
assistant) is built the way the rollout builds it, turn by turn, and compared with
apply_chat_template of the finished probe conversation. Most templates agree (Qwen2.5, Llama 3,
Gemma, SmolLM2, Mistral). Some re-render earlier turns: Qwen3 drops the reasoning of assistant
turns before the last user message (and, with enable_thinking=False, the empty <think></think>
the generation prompt gave every turn), DeepSeek-R1 and V3 drop every turn's reasoning. Such a
template is named in one warning line with the difference (`incremental` False, `differences`
maps "tool" / "environment" to the text), and handled one way: the trajectory keeps the tokens the model saw and sampled, turn
by turn (the loss is computed on what the model was conditioned on); apply_chat_template of the
finished conversation differs from it by the text named.
"""

from __future__ import annotations

import logging
from typing import Optional

logger = logging.getLogger(__name__)

_USER, _ANSWER = "Q", "A"


class TurnTemplate:
    def __init__(self, tokenizer, chat: bool, template_kwargs: Optional[dict] = None):
        self.tokenizer = tokenizer
        self.chat = chat
        self.template_kwargs = dict(template_kwargs or {})  # data.chat_template_kwargs (e.g. enable_thinking)
        self.close_ids: list[int] = []
        self.tool_role = "tool"
        self.differences: dict[str, str] = {}  # "tool" / "environment" -> how a re-render differs (module doc)
        if chat:
            base = self._render([{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER}])
            self._close = base[base.rindex(_ANSWER) + len(_ANSWER):]  # e.g. "<|im_end|>\n"
            self.close_ids = self._encode(self._close)
            try:
                shown = "tool-result" in self._delta_text([{"role": "tool", "content": "tool-result"}])
            except Exception:  # noqa: BLE001 - the template has no tool role: it raises for one
                shown = False
            self.tool_role = "tool" if shown else "user"  # (or it leaves the message out)
            self._check_incremental()

    # ------------------------------------------------------------------ public
    def close_assistant(self, generated: list[int]) -> list[int]:
        """The end-of-turn tokens a model turn still needs before another turn can follow: all of
        close_ids if the turn stopped on a stop string, the rest of them if it ended on the first
        (e.g. <|im_end|> then "\\n")."""
        close = self.close_ids
        for k in range(min(len(close), len(generated)), 0, -1):
            if generated[-k:] == close[:k]:
                return close[k:]
        return list(close)

    def tool_turn(self, results: list[str]) -> list[int]:
        """One turn holding every tool result of a model turn, then the assistant's generation prompt."""
        if not self.chat:
            return self._encode("".join(f"\n<tool_response>\n{r}\n</tool_response>" for r in results) + "\n")
        return self._delta(self.tool_messages(results))

    def tool_messages(self, results: list[str]) -> list[dict]:
        """The chat messages tool_turn renders: one "tool" message per result, or, for a template
        without a tool role, one user message holding them all."""
        if self.tool_role == "tool":
            return [{"role": "tool", "content": r} for r in results]
        return [{"role": "user", "content": "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)}]

    def observation_turn(self, text: str) -> list[int]:
        """An environment's observation as a user turn, then the assistant's generation prompt."""
        if not self.chat:
            return self._encode(f"\n{text}\n")
        return self._delta([{"role": "user", "content": text}])

    # ----------------------------------------------------------------- helpers
    def _render(self, messages, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                  **self.template_kwargs)

    def _delta(self, extra: list[dict]) -> list[int]:
        return self._encode(self._delta_text(extra))

    def _delta_text(self, extra: list[dict]) -> str:
        """What the template renders after a probe assistant turn's end-of-turn text when `extra` follows
        it, through the assistant's generation prompt."""
        full = self._render([{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER}] + extra,
                            generation_prompt=True)
        at = full.rfind(_ANSWER + self._close)
        if at < 0:
            raise ValueError(f"the chat template does not end an assistant turn followed by a {extra[0]['role']} turn "
                             f"with {self._close!r}, as it ends the last one")
        return full[at + len(_ANSWER + self._close):]

    def _probe_answer(self, context: str, k: int) -> str:
        """What a model writes after `context` (a rendered conversation ending in a generation prompt):
        its reasoning first where the template knows <think> and the prompt did not close it."""
        source = self.tokenizer.chat_template if isinstance(self.tokenizer.chat_template, str) else ""
        tail = context[-40:]
        if "<think>" not in source or "</think>" in tail:
            return f"answer {k}"
        opened = tail.rstrip("\n").endswith("<think>")
        return ("" if opened else "<think>\n") + f"reasoning {k}\n</think>\n\nanswer {k}"

    def _check_incremental(self) -> None:
        """Build a probe conversation turn by turn, as the rollout does, and compare it with
        apply_chat_template of the finished conversation (see the module doc); one warning line
        naming the difference when they differ."""
        for kind, extra in (("tool", self.tool_messages(["R"])), ("environment", [{"role": "user", "content": "O"}])):
            try:
                text = self._render([{"role": "user", "content": _USER}], generation_prompt=True)
                a1 = self._probe_answer(text, 1)
                # the first assistant turn, its generation prompt included
                turn = (len(self._render([{"role": "user", "content": _USER}])), len(text) + len(a1) + len(self._close))
                text += a1 + self._close + self._delta_text(extra)
                a2 = self._probe_answer(text, 2)
                text += a2 + self._close
                full = self._render([{"role": "user", "content": _USER}, {"role": "assistant", "content": a1}, *extra,
                                     {"role": "assistant", "content": a2}])
            except Exception:  # noqa: BLE001 - a conversation shape the template refuses: nothing to compare
                continue
            if text != full:
                self.differences[kind] = _difference(text, full, turn)
        if not self.differences:
            return
        found = sorted(set(self.differences.values()), key=list(self.differences.values()).index)
        what = "; ".join(f"{' and '.join(k for k, d in self.differences.items() if d == diff)} turns: {diff}"
                         for diff in found)
        logger.warning("verl: the chat template is not incremental (%s); the rollout keeps the tokens the model saw "
                       "and sampled, turn by turn, and computes the loss on them, so a trajectory differs from "
                       "apply_chat_template of its finished conversation there (docs/agents.md, Chat templates)", what)

    @property
    def incremental(self) -> bool:
        """Whether the turns built one by one equal apply_chat_template of the finished conversation
        for tool and environment turns alike."""
        return not self.differences

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _difference(built: str, full: str, turn: tuple) -> str:
    """The first place where `full` (the finished conversation re-rendered) differs from `built` (turn by
    turn), in words; `turn`: [start, end) of the first assistant turn in `built`. The smallest
    change after the common prefix that brings the two back in step (24 equal characters, or both ends)."""
    p = 0
    while p < min(len(built), len(full)) and built[p] == full[p]:
        p += 1
    i2, j2 = len(built), len(full)
    for d in range(1, len(built) + len(full) - 2 * p + 1):
        hits = [(p + k, p + d - k) for k in range(d + 1) if p + k <= len(built) and p + d - k <= len(full)
                and _in_step(built, full, p + k, p + d - k)]
        if hits:
            i2, j2 = hits[0]
            break
    was, now = built[p:i2][:80], full[p:j2][:80]
    where = " of an earlier assistant turn" if turn[0] <= p and i2 <= turn[1] else ""
    if not now:
        return f"re-rendering the finished conversation drops {was!r}{where}"
    return f"re-rendering the finished conversation turns {was!r}{where} into {now!r}"


def _in_step(a: str, b: str, i: int, j: int, run: int = 24) -> bool:
    n = min(run, len(a) - i, len(b) - j)
    return a[i:i + n] == b[j:j + n] and (n == run or (i + n == len(a) and j + n == len(b)))

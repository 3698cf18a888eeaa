"""Token ids of the turns the model does not write (tool results, environment observations),
with the chat template's own turn delimiters, each tokenized once and appended as is.

    turns = TurnTemplate(tokenizer, chat=True)
    ids = turns.close_assistant(generated_ids)       # the end-of-turn tokens a stopped turn lacks
    ids += turns.tool_turn(["579"])                   # <|im_start|>user\n<tool_response>...  <|im_start|>assistant\n
    ids += turns.observation_turn("higher")           # an environment's answer, as a user turn

The model's own tokens are never decoded and re-encoded: what the engine sampled is what the
actor scores. The delimiters come from rendering a probe conversation twice (without and with
the extra turn) and taking the difference, so any template that renders a prefix of the longer
conversation as the shorter one works (ChatML, Llama 3, ...). A tokenizer without a chat
template gets plain markers ("\n<tool_response>\n...\n</tool_response>\n").
"""

from __future__ import annotations

from typing import Optional

_USER, _ANSWER = "Q", "A"


class TurnTemplate:
    def __init__(self, tokenizer, chat: bool, template_kwargs: Optional[dict] = None):
        self.tokenizer = tokenizer
        self.chat = chat
        self.template_kwargs = dict(template_kwargs or {})  # data.chat_template_kwargs (e.g. enable_thinking)
        self.close_ids: list[int] = []
        if chat:
            base = self._render([{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER}])
            self._base = base
            self.close_ids = self._encode(base[base.rindex(_ANSWER) + len(_ANSWER):])  # e.g. "<|im_end|>\n"

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
        try:
            return self._delta([{"role": "tool", "content": r} for r in results])
        except Exception:  # noqa: BLE001 - a template without a tool role: the results as a user turn
            body = "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)
            return self._delta([{"role": "user", "content": body}])

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
        full = self._render([{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER}] + extra,
                            generation_prompt=True)
        if not full.startswith(self._base):
            raise ValueError("the chat template does not render a conversation as a prefix of a longer one")
        return self._encode(full[len(self._base):])

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

"""control-tokens: chat-template control tokens leaking into the output, over and over.

A model whose stop token is not honoured, or a server whose template is wrong,
writes its own control tokens as text: ``<|im_end|>\\n<|im_start|>`` until the
budget ends (43 of 93 real loops in one Japanese MT-bench source), or
``<unk|LLM-jp>`` between garbage, or Llama 2's template markers (``[<</SYS>>]`` on
every line: one more FastChat loop, 2026-12-03, nothing clean). Their unit looks
like code (brackets, bars, underscores), so ``cycle`` waits for its long code
span, and letters in them keep ``degeneracy`` away. A control token is never
content: at least ``min_tokens`` of them within ``window_chars`` characters trip.
A text that explains a chat template quotes a handful (a three-turn ChatML example
holds six).
"""

from __future__ import annotations

from collections import deque

from loopbreak._config import ControlTokensConfig
from loopbreak._engine.charclass import CONTROL_TOKEN
from loopbreak._engine.trip import Channel, Trip

CONTROL_TOKENS = "control-tokens"
# The longest a control token can be, so a carried piece stays short.
_MAX_TOKEN = 46


class ControlTokensDetector:
    """Control tokens counted over a sliding window of characters."""

    def __init__(self, config: ControlTokensConfig | None = None,
                 channel: Channel = "reasoning") -> None:
        cfg = config or ControlTokensConfig()
        self._channel: Channel = channel
        self._min_tokens = cfg.min_tokens
        self._window = cfg.window_chars
        self._consumed = 0
        self._carry = ""
        self._ends: deque[int] = deque()

    @property
    def consumed(self) -> int:
        return self._consumed

    def reset(self) -> None:
        self._consumed = 0
        self._carry = ""
        self._ends.clear()

    def feed(self, delta: str) -> Trip | None:
        if not self._min_tokens:
            self._consumed += len(delta)
            return None
        if not self._carry and "<" not in delta and "[" not in delta:
            self._consumed += len(delta)
            return None
        text = self._carry + delta
        base = self._consumed - len(self._carry)
        self._consumed += len(delta)
        ends = self._ends
        searched_to = 0
        for m in CONTROL_TOKEN.finditer(text):
            searched_to = m.end()
            if m.end() <= len(self._carry):
                continue  # counted with the delta it ended in
            end = base + m.end()
            ends.append(end)
            while ends[0] <= end - self._window:
                ends.popleft()
            if len(ends) >= self._min_tokens:
                return Trip(CONTROL_TOKENS, self._channel, self._consumed, end,
                            {"tokens": len(ends), "window_chars": self._window,
                             "token": m.group()})
        # A token may be cut by the delta's end: keep what could still become one.
        tail_from = max(searched_to, len(text) - _MAX_TOKEN)
        cut = text.rfind("<", tail_from)
        bracket = text.rfind("[", tail_from)
        cut = max(cut, bracket)
        self._carry = text[cut:] if cut >= 0 else ""
        return None

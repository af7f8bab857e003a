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
from loopbreak._engine.charclass import (
    CONTROL_TOKEN,
    CONTROL_TOKEN_HEAD,
    CONTROL_TOKEN_OPEN,
    CONTROL_TOKEN_START,
)
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
        self._counted_to = 0  # where the last token counted ends
        self._ends: deque[int] = deque()

    @property
    def consumed(self) -> int:
        return self._consumed

    def reset(self) -> None:
        self._consumed = 0
        self._carry = ""
        self._counted_to = 0
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
        if CONTROL_TOKEN_START.search(text) is None:
            # Code and maths write "<" and "[" often, a token's first two characters hardly
            # ever: no token is here, and only the last character can begin one.
            self._carry = text[-1] if text[-1] in "<[" else ""
            return None
        # A token written inside a "<|..." or "<unk..." the text's end leaves open waits:
        # whether it counts (or the open one, holding it) is up to what comes.
        last = text.rfind("<")
        open_at = last if last >= 0 and CONTROL_TOKEN_OPEN.match(text, last) else len(text)
        ends = self._ends
        searched_to = 0
        for m in CONTROL_TOKEN.finditer(text):
            if m.start() > open_at:
                break
            searched_to = m.end()
            end = base + searched_to
            if end <= self._counted_to:
                continue  # counted when it was first read whole, in the carry
            self._counted_to = end
            ends.append(end)
            while ends[0] <= end - self._window:
                ends.popleft()
            if len(ends) >= self._min_tokens:
                return Trip(CONTROL_TOKENS, self._channel, self._consumed, end,
                            {"tokens": len(ends), "window_chars": self._window,
                             "token": m.group()})
        # A token may be cut by the delta's end: keep it from its earliest possible start
        # ("<<SYS>>" cut after its first "<" begins at that one, not at the last "<").
        head = CONTROL_TOKEN_HEAD.search(
            text, min(max(searched_to, len(text) - _MAX_TOKEN), open_at))
        self._carry = text[head.start() :] if head is not None else ""
        return None

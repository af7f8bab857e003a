"""What every rule about tool calls shares: a call's key, a result's fingerprint, the
decisions the rules hand back.

A call's key is the tool name plus a canonical form of its arguments; a result's
fingerprint is a digest of its text with whitespace collapsed and long hex ids
masked, so a result that differs only in a request id or its line breaks counts
as the same, and one whose numbers moved (a page, a count, a line) does not.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

_HEX_ID = re.compile(r"0x[0-9a-fA-F]+|\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*[0-9])"
                     r"[0-9a-fA-F]{8,}\b")
_SPACE = re.compile(r"\s+")
_DIGITS = re.compile(r"\d+")


def result_fingerprint(result: str, *, numbers: bool = True) -> str:
    """A short digest that two results share when a reader would call them the same;
    ``numbers=False`` also masks every digit run (what a count or a timer changes)."""
    text = _HEX_ID.sub("<hex>", result)
    if not numbers:
        text = _DIGITS.sub("#", text)
    text = _SPACE.sub(" ", text).strip()
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True)
class ToolStep:
    """One finished tool call as the rules remember it."""

    name: str
    key: str
    result: str  # the fingerprint
    failed: bool
    error: str = ""  # normalised error text when failed
    shape: str = ""  # the fingerprint with numbers masked


@dataclass(frozen=True)
class ToolDecision:
    """Whether a tool call may be dispatched; ``reason`` is what the model reads if not."""

    allowed: bool
    reason: str | None = None
    failures: int = 0
    rule: str | None = None


@dataclass(frozen=True)
class ToolGuidance:
    """Text that goes with a tool result the model will read."""

    text: str
    mode: Literal["prefix", "replace"]
    failures: int
    rule: str = "tool-failure"

    def apply(self, result: str) -> str:
        """The result as the model should see it."""
        if self.mode == "replace":
            return self.text
        return f"{self.text}\n\n{result}" if result else self.text

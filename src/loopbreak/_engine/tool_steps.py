"""What every rule about tool calls shares: a call's key, a result's fingerprint, the
decisions the rules hand back.

A call's key is the tool name plus a canonical form of its arguments; a result's
fingerprint is a digest of its text with whitespace collapsed and long hex ids
masked, so a result that differs only in a request id or its line breaks counts
as the same, and one whose numbers moved (a page, a count, a line) does not; its
shape masks the numbers too, for the rule that asks whether a round of calls
brought anything new.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Literal

from loopbreak._engine import accelerator
from loopbreak._engine.masking import mask_digit_runs, may_hold_hex_run
from loopbreak._engine.state_copy import CopiedByFields
from loopbreak._engine.text_cache import KEPT_CHARS, TextCache

# A run of hex digits is an id when it holds a letter and a digit (checked on the match:
# lookaheads at every word boundary cost a proxy's history replay ten times more).
_HEX_ID_CHARS = 8
_HEX_RUN = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b")
_LETTER = re.compile(r"[a-fA-F]")
_DIGIT = re.compile(r"\d")
# A proxy replays the whole history on every request: the same results come back each
# time, so their fingerprints are kept (results up to 64 kB, KEPT_CHARS of them).
_CACHED_CHARS = 1 << 16


def _id(match: re.Match[str]) -> str:
    run = match[0]
    if run.startswith("0x") or (_LETTER.search(run) and _DIGIT.search(run)):
        return "<hex>"
    return run


def digest(text: str) -> str:
    """A short stable digest of ``text`` (what keys and fingerprints are made of)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def result_fingerprint(result: str) -> str:
    """A short digest two tool results share when a reader would call them the same
    (whitespace and long hex ids aside)."""
    return _kept_fingerprints(result)


def result_shape(result: str) -> str:
    """The fingerprint with every digit run masked too (what a count or a timer changes)."""
    return _kept_shapes(result)


def _words(result: str) -> str:
    """``result`` with its hex ids masked and its whitespace collapsed."""
    kernels = accelerator.loaded()
    if kernels is not None and result.isascii():
        words: str | None = kernels.ascii_words(result, _HEX_ID_CHARS)
        if words is not None:
            return words
        return kernels.ascii_words(_HEX_RUN.sub(_id, result), 0)  # type: ignore[no-any-return]
    return python_words(result)


def python_words(result: str) -> str:
    """``_words`` without the compiled kernels (the reference)."""
    text = _HEX_RUN.sub(_id, result) if may_hold_hex_run(result, _HEX_ID_CHARS) else result
    return " ".join(text.split())


def _fingerprint(result: str) -> str:
    return digest(_words(result))


def _shape(result: str) -> str:
    # No digit is whitespace: the digits are masked after the collapse, on fewer characters.
    return digest(mask_digit_runs(_words(result), "#"))


_kept_fingerprints = TextCache(_fingerprint, KEPT_CHARS, _CACHED_CHARS)
_kept_shapes = TextCache(_shape, KEPT_CHARS, _CACHED_CHARS)


def clear_caches() -> None:
    """Forget the kept fingerprints (a benchmark's cold start)."""
    _kept_fingerprints.clear()
    _kept_shapes.clear()


# Deep-copied (a checkpoint's copy), not shared though frozen: the shape is kept in the step
# when first asked for, and a kept checkpoint must not take in what a later replay works out.
@dataclass(frozen=True, init=False)
class ToolStep(CopiedByFields):
    """One finished tool call as the rules remember it."""

    name: str
    key: str
    result: str  # the fingerprint
    failed: bool
    error: str = ""  # normalised error text when failed
    text: str = field(default="", compare=False, repr=False)  # the result as the model read it

    def __init__(self, name: str, key: str, result: str, failed: bool, error: str = "",
                 text: str = "") -> None:
        # Frozen, yet one is made for every tool result of a replayed history: the fields
        # go straight into the instance, not through the frozen __setattr__.
        fields = self.__dict__
        fields["name"] = name
        fields["key"] = key
        fields["result"] = result
        fields["failed"] = failed
        fields["error"] = error
        fields["text"] = text

    @property
    def shape(self) -> str:
        """The result's fingerprint with numbers masked, worked out when first asked: only
        alternation reads it, and only for two steps of one call (a session's first
        request of 800 calls once masked 1.2 MB of results for nothing, ~10 ms)."""
        shape: str | None = self.__dict__.get("_shape")
        if shape is None:
            shape = self.__dict__["_shape"] = result_shape(self.text)
        return shape


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

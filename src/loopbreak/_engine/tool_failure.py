"""tool-failure: the same failing tool call re-sent again and again in one turn.

A call's key is the tool name plus a canonical form of its arguments (sorted
keys, bounded depth and size). Arguments are not number-normalised: a changed
line number is a new call, and a new call deserves its chance. A failure's
signature adds the error code and the error text normalised (lower case, hex ->
``<hex>``, digit runs -> ``<n>``, whitespace collapsed, first ``error_chars``).

Within one turn: from the ``steer_from``-th failure of a signature on, the result
the model sees carries guidance to change approach (with the original error);
once a key has failed ``deny_after`` times, the next identical call is denied
before dispatch with a reason. A success of a key lifts its denial and clears
its counts; a new turn starts clean. The gate can only use the key: before
dispatch there is no result yet.
"""

from __future__ import annotations

import json
import re
from typing import Any

from loopbreak._config import ToolFailureConfig
from loopbreak._engine import tool_steps
from loopbreak._engine.masking import mask_digit_runs, may_hold_hex_run
from loopbreak._engine.notices import LanguageSource, render
from loopbreak._engine.state_copy import CopiedByFields
from loopbreak._engine.text_cache import KEPT_CHARS, TextCache
from loopbreak._engine.tool_steps import ToolDecision, ToolGuidance
from loopbreak._engine.tool_steps import digest as _digest

__all__ = ["ToolDecision", "ToolFailureBreaker", "ToolGuidance", "canonical_arguments",
           "looks_like_failure", "normalise_error"]

RULE = "tool-failure"

_HEX_ID_CHARS = 6
_HEX = re.compile(r"0x[0-9a-f]+|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b")
_SPACE = re.compile(r"\s+")


def _bounded(value: Any, depth: int) -> Any:
    """``value`` with dict keys sorted and anything deeper than ``depth`` replaced by a digest."""
    if isinstance(value, dict):
        if depth <= 0:
            return "<" + _digest(json.dumps(value, sort_keys=True, default=str)) + ">"
        items = sorted(value.items(), key=lambda kv: str(kv[0]))
        return {str(k): _bounded(v, depth - 1) for k, v in items}
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            return "<" + _digest(json.dumps(value, sort_keys=True, default=str)) + ">"
        return [_bounded(v, depth - 1) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def canonical_arguments(arguments: Any, max_depth: int = 8, max_chars: int = 4096) -> str:
    """The arguments of a tool call as one stable string.

    A JSON string is parsed first (OpenAI streams arguments as text); text that is
    not JSON is used as it is, stripped. Past ``max_chars`` the string keeps its
    head and a digest of the whole, so it stays bounded and still distinct.
    """
    if isinstance(arguments, (bytes, bytearray)):
        arguments = arguments.decode("utf-8", "replace")
    if isinstance(arguments, str):
        return _kept_canonical_forms(arguments, max_depth, max_chars)
    return _canonical(arguments, max_depth, max_chars)


# A proxy replays the whole history on every request: the same arguments and results
# come back each time, so their canonical forms and verdicts are kept (texts up to
# _CACHED_CHARS, KEPT_CHARS characters of them per cache).
_CACHED_CHARS = 4096
_FAILURE_HEAD_CHARS = 2000


def clear_caches() -> None:
    """Forget the kept canonical forms, verdicts and fingerprints (a benchmark's cold
    start)."""
    tool_steps.clear_caches()
    _kept_canonical_forms.clear()
    _kept_keys.clear()
    _kept_failure_readings.clear()
    _kept_error_forms.clear()


def _canonical(arguments: Any, max_depth: int, max_chars: int) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            arguments = arguments.strip()
    text = json.dumps(_bounded(arguments, max_depth), sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"), default=str)
    if len(text) > max_chars:
        text = f"{text[: max_chars - 20]}…#{_digest(text)}"
    return text


_kept_canonical_forms = TextCache(_canonical, KEPT_CHARS, _CACHED_CHARS)


def _key(arguments: Any, name: str, max_depth: int, max_chars: int) -> str:
    return f"{name}\x00{canonical_arguments(arguments, max_depth, max_chars)}"


_kept_keys = TextCache(_key, KEPT_CHARS, _CACHED_CHARS)


# How a failure report starts, and what says one anywhere in its head. Two patterns so
# that the second, which must scan, runs only where one of its words occurs. Each
# alternative was read in real tool output (shells, editors, code search, web and API
# tools, text environments); the README's agent-corpus table gives how often each
# reading agrees with the hosts' own failure flags.
# Matched where the text's leading whitespace ends, not with a leading ``\s*``: no form
# starts with a blank, and ``\s*`` gave each blank of an indented result (`cat -n` output)
# back to try every form again (1.3 -> 0.5 us a result).
_LEADING_SPACE = re.compile(r"\s*")
_FAILURE_START = re.compile(
    r"(?:error\b|\w*error:|exception\b|traceback \(most recent call last\)|fatal\b|"
    r"failed\b|failure\b|command failed|permission denied|no such \w+|E[A-Z]{2,}\b:|"
    r"invalid\b|unknown (?:action|command|tool|function|option|argument)\b|"
    r"(?:could|can)(?:not|n't)\b|could not\b|unable to\b|nothing happens\b|"
    r"no (?:more )?results?\b|no \w+(?: \w+)? (?:found|matched|matches)\b|"
    r"(?:[\w'\"`.-]+ ){0,3}not found\b|"
    r"\{\s*\"error\"\s*:\s*(?:\"[^\"\s]|\{\s*\"|\[\s*[^\]\s]))",
    re.IGNORECASE,
)
_FAILURE_ANYWHERE = re.compile(
    r"\bexit(?:ed with)? (?:code|status):? ?[1-9]\d*\b|\bcommand not found\b"
    r"|\bno such file or directory\b|\bcould not be applied\b|\bwas not applied\b"
    r"|\bno changes were made\b|\bnot found in\b|\bseems? not valid\b",
    re.IGNORECASE,
)
_FAILURE_WORDS = ("exit", "command not found", "no such file or directory", "applied",
                  "no changes were made", "not found in", "not valid")
# A first line that only announces what follows ("Result of search_code(x):") does not
# hide a report on the next.
_HEADER_LINE = re.compile(r"[^\n]{1,200}:[ \t]*\n")


def looks_like_failure(result: str) -> bool:
    """Whether a tool result reads as a failure, for logs and protocols that do not flag
    one (an OpenAI ``role: tool`` message has no error field): it starts like an error
    report (also after a one-line header ending in a colon), reports nothing found or an
    invalid action, carries a JSON ``error``, or says a command exited non-zero or an edit
    was not applied. Hosts that know should say so instead."""
    return _kept_failure_readings(result[:_FAILURE_HEAD_CHARS])


def _head_looks_like_failure(head: str) -> bool:
    if _starts_like_failure(head, 0):
        return True
    header = _HEADER_LINE.match(head)
    if header is not None and _starts_like_failure(head, header.end()):
        return True
    scanned = head[:600]
    folded = scanned.casefold()
    # The words first (a scan in C each); the pattern only where one of them occurs.
    for word in _FAILURE_WORDS:
        if word in folded:
            return bool(_FAILURE_ANYWHERE.search(scanned))
    return False


def _starts_like_failure(head: str, at: int) -> bool:
    start = _LEADING_SPACE.match(head, at)
    return _FAILURE_START.match(head, start.end() if start else at) is not None


_kept_failure_readings = TextCache(_head_looks_like_failure, KEPT_CHARS, _FAILURE_HEAD_CHARS)


def normalise_error(text: str, max_chars: int = 160) -> str:
    """Error text with what changes between identical failures taken out."""
    return _kept_error_forms(text, max_chars)


def _normalise_error(text: str, max_chars: int) -> str:
    # No replacement spans whitespace, so a prefix cut before a whitespace character
    # normalises to the start of the whole text's normal form: a long result costs what
    # its first few hundred characters do.
    cut = 2 * max_chars
    while cut < len(text):
        space = _SPACE.search(text, cut)
        if space is None:
            break
        head = _normalise(text[: space.start()])
        if len(head) >= max_chars:
            return head[:max_chars]
        cut *= 4
    return _normalise(text)[:max_chars]


_kept_error_forms = TextCache(_normalise_error, KEPT_CHARS, _CACHED_CHARS)


def _normalise(text: str) -> str:
    text = text.lower()
    if may_hold_hex_run(text, _HEX_ID_CHARS):
        text = _HEX.sub("<hex>", text)
    # Whitespace runs as one space, ends stripped: str.split() and \s read the same
    # characters as whitespace.
    return " ".join(mask_digit_runs(text, "<n>").split())


class ToolFailureBreaker(CopiedByFields):
    """Per-turn failure counts by key and by signature."""

    def __init__(self, config: ToolFailureConfig | None = None) -> None:
        self._config = config or ToolFailureConfig()
        self._key_failures: dict[str, int] = {}
        self._signature_failures: dict[str, dict[tuple[str, str], int]] = {}

    def key(self, name: str, arguments: Any) -> str:
        """The key of a call: tool name and canonical arguments."""
        cfg = self._config
        if type(arguments) is str:
            # The same key object for the same call each time: a replayed history's calls
            # are keyed once, and the key's hash is worked out once.
            return _kept_keys(arguments, name, cfg.max_arg_depth, cfg.max_arg_chars)
        return _key(arguments, name, cfg.max_arg_depth, cfg.max_arg_chars)

    def start_turn(self) -> None:
        """A new turn starts clean."""
        self._key_failures.clear()
        self._signature_failures.clear()

    def may_deny(self, name: str) -> bool:
        """Whether some call of tool ``name`` is denied now (cheap: no arguments needed)."""
        cfg = self._config
        prefix = f"{name}\x00"
        return cfg.enabled and any(count >= cfg.deny_after and key.startswith(prefix)
                                   for key, count in self._key_failures.items())

    def failures(self, name: str, arguments: Any) -> int:
        """How often this exact call failed in this turn."""
        return self._key_failures.get(self.key(name, arguments), 0)

    def before(self, name: str, arguments: Any, language: LanguageSource = "en") -> ToolDecision:
        """Allow or deny a call before it is dispatched."""
        return self.before_key(name, self.key(name, arguments), language)

    def before_key(self, name: str, key: str, language: LanguageSource = "en") -> ToolDecision:
        """:meth:`before` for a call whose :meth:`key` is known."""
        cfg = self._config
        if not cfg.enabled:
            return ToolDecision(True)
        failures = self._key_failures.get(key, 0)
        if failures >= cfg.deny_after:
            reason = render("tool.denied", language, tool=name, failures=failures)
            return ToolDecision(False, reason, failures, RULE)
        return ToolDecision(True, None, failures)

    def after(self, name: str, arguments: Any, *, failed: bool, error_code: str | None = None,
              error_text: str = "", language: LanguageSource = "en") -> ToolGuidance | None:
        """Record a result; a failure repeated often enough gets guidance."""
        return self.after_key(name, self.key(name, arguments), failed=failed,
                              error_code=error_code, error_text=error_text, language=language)

    def after_key(self, name: str, key: str, *, failed: bool, error_code: str | None = None,
                  error_text: str = "", language: LanguageSource = "en") -> ToolGuidance | None:
        """:meth:`after` for a call whose :meth:`key` is known."""
        cfg = self._config
        if not cfg.enabled:
            return None
        if not failed:
            self._key_failures.pop(key, None)
            self._signature_failures.pop(key, None)
            return None
        self._key_failures[key] = self._key_failures.get(key, 0) + 1
        signature = (error_code or "", normalise_error(error_text, cfg.error_chars))
        counts = self._signature_failures.setdefault(key, {})
        count = counts[signature] = counts.get(signature, 0) + 1
        if count < cfg.steer_from:
            return None
        text = render("tool.guidance", language, tool=name, failures=count,
                      error=error_text.strip() or error_code or "(no error text)")
        return ToolGuidance(text, "replace" if cfg.guidance == "replace" else "prefix", count,
                            RULE)

"""What the conversation a client sends says, and the request to forward instead.

The proxy (and the LiteLLM hook) keep no session state: every judgement that
spans requests comes from the history in the request itself. Replaying it through a session guard
gives the stall verdict of the last call, the tool-failure breaker's guidance
for this turn's results and its denials, and how many cuts this turn already
had (their notices are in the assistant messages the client stored). The same
history always gives the same answer, so any replica can serve any request.

Replaying must stay cheap when a session grows long: the stall rule needs the
4-grams of the last few judged calls only (restatement compares neighbours),
so older calls are judged by their shape (reasoning-only or not) alone. The proxy
also keeps where each session's last replay left off (``ReplayCheckpoints``): a
cache, not state; a request whose history does not extend a kept one is replayed
from its first message, to the same view.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from loopbreak._config import Config, ProxyConfig
from loopbreak._engine.call_guard import CallSummary
from loopbreak._engine.grams import GramSet
from loopbreak._engine.notices import TEXTS, Language
from loopbreak._engine.session_guard import SessionGuard
from loopbreak._engine.stall import Reaction
from loopbreak._engine.tool_failure import ToolGuidance, looks_like_failure
from loopbreak._engine.tool_failure import clear_caches as _clear_tool_caches
from loopbreak._engine.trip import Trip
from loopbreak._recovery.requests import requested_dialect, thinking_off

Kind = Literal["openai", "anthropic"]

__all__ = ["HistoryView", "Kind", "ReplayCheckpoints", "replay", "session_key", "thinking_off",
           "tool_calls_of", "with_denial", "with_guidance", "with_note",
           "without_unsigned_thinking"]

# The start of every cut notice, in every language: how the proxy recognises its own
# notices in the history a client sends back.
CUT_MARKERS = tuple(TEXTS[lang][name].split("{", 1)[0].strip()
                    for lang in TEXTS for name in ("cut.reasoning", "cut.text"))
_NOTICE_TAG = "[loopbreak]"
# A proxy replays the whole history on every request, and the last few calls' reasoning
# (whose 4-grams the stall rule compares) comes back in each one: their gram sets are kept,
# for reasoning up to this long, a bounded number of them (about 0.6 MB each at most).
_CACHED_REASONING_CHARS = 8192
_GRAMS_CACHE_SIZE = 32


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content
                       if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def tool_calls_of(message: dict[str, Any], kind: Kind) -> list[tuple[str, str, str]]:
    """The tool calls of an assistant message (one of a history, or a whole answer's):
    ``(id, name, arguments as JSON text)`` each."""
    if kind == "openai":
        return [(str(call.get("id")), str(fn.get("name") or ""), str(fn.get("arguments") or ""))
                for call in message.get("tool_calls") or []
                if isinstance(call, dict) and isinstance(fn := call.get("function"), dict)]
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [(str(block.get("id")), str(block.get("name") or ""),
             json.dumps(block.get("input", {}), ensure_ascii=False, sort_keys=True))
            for block in blocks if isinstance(block, dict) and block.get("type") == "tool_use"]


def _said(message: dict[str, Any], kind: Kind) -> tuple[str, str]:
    """An assistant message's reasoning and visible text."""
    content = message.get("content")
    reasoning = text = ""
    if kind == "openai":
        for name in ("reasoning_content", "reasoning"):
            if isinstance(message.get(name), str):
                reasoning += message[name]
        return reasoning, _text_of(content)
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            reasoning += block["thinking"]
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            text += block["text"]
    return reasoning, content if isinstance(content, str) else text


def _last_calls(raw: list[Any], start: int, count: int) -> list[int]:
    """The indices of the last ``count`` assistant messages of ``raw[start:]``, newest first."""
    found: list[int] = []
    for i in range(len(raw) - 1, start - 1, -1):
        m = raw[i]
        if isinstance(m, dict) and m.get("role") == "assistant":
            found.append(i)
            if len(found) == count:
                break
    return found


@dataclass
class HistoryView:
    """What the history says the proxy should do with this request."""

    kind: Kind
    session: SessionGuard
    reaction: Reaction | None = None
    cuts_this_turn: int = 0
    guidance: dict[tuple[int, int | None], ToolGuidance] = field(default_factory=dict)
    language: Language = "en"  # the one notices are written in now

    def may_deny(self, name: str) -> bool:
        """Whether some call of tool ``name`` failed often enough in this turn to be denied:
        only then does the proxy hold that tool's calls back until they are complete."""
        return self.session.may_deny(name)

    def denied(self, name: str, arguments: str) -> str | None:
        """The reason a tool call must not be dispatched, or ``None`` to let it through."""
        decision = self.session.before_tool(name, arguments)
        return None if decision.allowed else decision.reason


@dataclass
class _Replayed:
    """What a replay holds after some of the history: the session guard, what the view
    says so far, and the tool calls made, by id."""

    session: SessionGuard
    reaction: Reaction | None = None
    cuts_this_turn: int = 0
    guidance: dict[tuple[int, int | None], ToolGuidance] = field(default_factory=dict)
    calls_by_id: dict[str, tuple[str, str]] = field(default_factory=dict)
    working: bool = False  # the model's last message asked for tools: its turn goes on
    chars: int = 0  # characters of the messages replayed (what a checkpoint of it keeps)

    def copy(self) -> _Replayed:
        """A state to go on from while this one is kept: the guard deep-copied (its
        configuration is frozen and shared), the rest holds frozen values."""
        config = self.session.config
        memo: dict[int, Any] = {id(config): config}
        memo.update((id(section), section) for section in vars(config).values())
        return _Replayed(copy.deepcopy(self.session, memo), self.reaction, self.cuts_this_turn,
                         dict(self.guidance), dict(self.calls_by_id), self.working, self.chars)


@dataclass
class _Checkpoint:
    messages: list[Any]  # a copy of the history's messages before the checkpoint
    config: Config
    state: _Replayed


_HEAD_CHARS = 1000


def _head(raw: list[Any], kind: Kind) -> tuple[str, ...]:
    """What tells one session's history from another's, cheaply: the start of its first two
    messages (a checkpoint found by it is still checked message by message)."""
    head: list[str] = [kind]
    for m in raw[:2]:
        if isinstance(m, dict):
            head += [str(m.get("role")), _text_of(m.get("content"))[:_HEAD_CHARS]]
    return tuple(head)


def _copied(value: Any) -> Any:
    """A copy of a request's messages: JSON values copied by hand (a third of what
    ``copy.deepcopy`` takes over an 800-call history; strings and numbers are shared, being
    immutable), anything else a host put in deep-copied."""
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


class ReplayCheckpoints:
    """Where the replays of long histories left off, so that a session's next request (its
    history and the few messages since) replays only what is new.

    A replay judges every message in order, and a message's verdict depends on the
    messages before it alone, except that the last ``stall.max_stalled_calls + 1`` calls
    also have their reasoning's 4-grams compared. The state just before those calls is
    kept, with a copy of the messages that led to it; a later history whose messages up
    to there are equal (compared value by value) and that holds at least as many calls
    after them resumes from it. The view it gives is the one a replay from the first
    message gives (tested on real and generated histories), so any replica still serves
    any request; this only saves the work.

    The messages are kept as copies of their own (a host may change a request's objects
    after the replay): a session's first checkpoint copies its history, each later one
    only the messages since the checkpoint it resumed from. A host that never changes a
    request's objects once replayed (the proxy parses every request itself, and what it
    sends changed is a copy: ``with_guidance``, ``with_note``) passes ``copy_messages=False``
    and the checkpoint keeps the request's own messages (in a new list): a session's first
    request then copies nothing (~3 ms for 800 calls). Bounded by the characters of
    the messages kept (``max_chars``), newest session kept; one checkpoint per session head
    (the start of its first two messages). Safe to share between threads.
    """

    def __init__(self, max_chars: int = ProxyConfig().replay_checkpoint_chars, *,
                 copy_messages: bool = True) -> None:
        self._max_chars = max_chars
        self._copy: Callable[[list[Any]], list[Any]] = _copied if copy_messages else list
        self._kept: OrderedDict[tuple[str, ...], _Checkpoint] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.resumed = 0
        """Replays that resumed from a checkpoint."""

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def max_chars(self) -> int:
        """The most characters of messages the checkpoints keep."""
        return self._max_chars

    @property
    def chars(self) -> int:
        """Characters of the messages the checkpoints keep."""
        return self._chars

    def resume(self, raw: list[Any], kind: Kind, config: Config, calls_after: int
               ) -> _Checkpoint | None:
        """The checkpoint to resume a replay of ``raw`` from (taken out: its state is the
        caller's to change), or ``None``: none fits."""
        key = _head(raw, kind)
        found = self._kept.get(key)
        if found is None:
            return None
        start = len(found.messages)
        if len(raw) <= start or not (found.config is config or found.config == config):
            return None
        calls = 0
        for m in raw[start:]:
            if isinstance(m, dict) and m.get("role") == "assistant":
                calls += 1
        # Fewer calls after it: a call before the checkpoint is one whose 4-grams count now.
        if calls < calls_after or raw[:start] != found.messages:
            return None
        with self._lock:
            # Handed over, not copied: this replay keeps a checkpoint of its own further on.
            if self._kept.get(key) is not found:
                return None  # another thread took it
            del self._kept[key]
            self._chars -= found.state.chars
            self.resumed += 1
        return found

    def keep(self, raw: list[Any], kind: Kind, config: Config, at: int, state: _Replayed,
             resumed: _Checkpoint | None = None) -> None:
        """Keep ``state``, the replay's after ``raw[:at]`` (copied: the replay goes on);
        ``resumed``: the checkpoint the replay resumed from, whose messages are ``raw``'s."""
        if state.chars > self._max_chars // 2:
            return
        if resumed is not None:
            messages = resumed.messages + self._copy(raw[len(resumed.messages):at])
        else:
            messages = self._copy(raw[:at])
        checkpoint = _Checkpoint(messages, config, state.copy())
        key = _head(raw, kind)
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._chars -= old.state.chars
            self._kept[key] = checkpoint
            self._chars += state.chars
            while self._chars > self._max_chars:
                _, dropped = self._kept.popitem(last=False)
                self._chars -= dropped.state.chars


def replay(body: dict[str, Any], kind: Kind, config: Config,
           checkpoints: ReplayCheckpoints | None = None) -> HistoryView:
    """Replay the request's history through a fresh session guard (or, with
    ``checkpoints``, from where an earlier replay of the same history left off)."""
    raw = body.get("messages")
    if not isinstance(raw, list):
        raw = []
    # Only the last few judged calls need their 4-grams: restatement compares neighbours.
    tail = config.stall.max_stalled_calls + 1
    found = checkpoints.resume(raw, kind, config, tail) if checkpoints is not None else None
    start, state = (len(found.messages), found.state) if found is not None else (
        0, _Replayed(SessionGuard(config)))
    last_calls = _last_calls(raw, start, tail)
    # The state before the first of those calls is what a later history resumes from.
    mark = last_calls[-1] if checkpoints is not None and len(last_calls) == tail else -1
    compiled = config.judging.compiled != "off"
    # The messages are read straight from the request, one pass, no record made of each: a
    # history of 800 calls holds 1,600 of them, all replayed when no checkpoint fits.
    for i in range(start, len(raw)):
        m = raw[i]
        if not isinstance(m, dict):
            continue
        if i == mark:
            assert checkpoints is not None
            checkpoints.keep(raw, kind, config, i, state, found)
        role, content = m.get("role"), m.get("content")
        if role == "assistant":
            reasoning, text = _said(m, kind)
            grams = _reasoning_grams(reasoning, compiled) if i in last_calls else None
            _replay_call(state, reasoning, text, tool_calls_of(m, kind), grams)
        elif role == "tool":
            text = _text_of(content)
            _replay_result(state, (i, None), str(m.get("tool_call_id")), text,
                           looks_like_failure(text))
        elif role == "user":
            replayed = False
            for j, block in enumerate(content if isinstance(content, list) else ()):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    text = _text_of(block.get("content"))
                    failed = bool(block.get("is_error")) or looks_like_failure(text)
                    _replay_result(state, (i, j), str(block.get("tool_use_id")), text, failed)
                    replayed = True
            if not replayed:
                _replay_user(state, _text_of(content))
    session = state.session
    return HistoryView(kind, session, state.reaction, state.cuts_this_turn, state.guidance,
                       session.language)


def _replay_user(state: _Replayed, text: str) -> None:
    session = state.session
    # A user message while the model is working (a host's reminder, a steer) is part of the
    # turn; only one after the model answered starts a new turn. A note loopbreak itself
    # added to a request (a steer, a retry's notice) never does.
    if not state.working and not is_notice(text):
        session.start_turn(text)
        state.cuts_this_turn = 0
        state.guidance.clear()
        if state.reaction is not None and state.reaction.rule == "monologue" and \
                not session.monologue_run:
            state.reaction = None  # the user said something new
    session.observe(text[-2000:])
    state.chars += len(text)


def _replay_call(state: _Replayed, reasoning: str, text: str,
                 tool_calls: list[tuple[str, str, str]], grams: GramSet | None) -> None:
    session = state.session
    session.count_call()
    # Every marker starts with the tag: one search rules most answers out.
    cut = _NOTICE_TAG in text and any(marker in text for marker in CUT_MARKERS)
    if cut:
        state.cuts_this_turn += 1
    trip = Trip("notice", "reasoning", 0, 0) if cut else None
    tool_names = tuple([call[1] for call in tool_calls])
    summary = CallSummary(len(reasoning), 0 if cut else len(text.strip()), tool_names, trip,
                          grams, "" if cut else text)
    state.reaction = session.finish_call(summary).reaction
    calls_by_id = state.calls_by_id
    for call_id, name, args in tool_calls:
        calls_by_id[call_id] = (name, args)
        state.chars += len(args)
    state.working = bool(tool_calls)
    session.observe((text or reasoning)[-2000:])
    state.chars += len(reasoning) + len(text)


def _replay_result(state: _Replayed, place: tuple[int, int | None], call_id: str, text: str,
                   failed: bool) -> None:
    name, args = state.calls_by_id.get(call_id, ("", ""))
    guidance = state.session.after_tool(name, args, text, failed=failed) if name else None
    if guidance is not None:
        state.guidance[place] = guidance
    state.chars += len(text)


def _grams_of(reasoning: str, compiled: bool) -> GramSet:
    grams = GramSet(compiled=compiled)
    grams.feed(reasoning)
    # Read once here: a kept set is shared by later requests (and threads), and a read takes
    # in what waits; read now, no later read changes it.
    len(grams)
    return grams


_cached_grams = lru_cache(maxsize=_GRAMS_CACHE_SIZE)(_grams_of)


def _reasoning_grams(reasoning: str, compiled: bool) -> GramSet:
    """The 4-grams of a replayed call's reasoning; the same set for the same text while it is
    kept (the stall rule only reads it)."""
    if len(reasoning) <= _CACHED_REASONING_CHARS:
        return _cached_grams(reasoning, compiled)
    return _grams_of(reasoning, compiled)


def clear_caches() -> None:
    """Forget everything replays keep between requests (a benchmark's cold start)."""
    _cached_grams.cache_clear()
    _clear_tool_caches()


def with_guidance(body: dict[str, Any], view: HistoryView) -> dict[str, Any]:
    """The request with this turn's tool-failure guidance put into the results it concerns."""
    if not view.guidance:
        return body
    body, messages = _forked(body)
    for (index, block), guidance in view.guidance.items():
        message = _own(messages, index)
        if block is None:
            message["content"] = guidance.apply(_text_of(message.get("content")))
        else:
            content = message["content"] = list(message["content"])
            result = content[block] = dict(content[block])
            result["content"] = guidance.apply(_text_of(result.get("content")))
    return body


def _forked(body: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """A copy of ``body`` with a messages list of its own, holding the original messages:
    one is replaced by a copy (``_own``) before it changes. A 6 MB history is not copied
    whole for the one message a note or guidance changes (a deep copy took 7.6 ms of the
    proxy's event loop on every request of a failing turn); the caller's body and
    messages are never changed."""
    out = dict(body)
    messages = out.get("messages")
    out["messages"] = messages = list(messages) if isinstance(messages, list) else []
    return out, messages


def _own(messages: list[Any], index: int) -> dict[str, Any]:
    """Message ``index`` replaced by a copy of its own, to change."""
    message = dict(messages[index])
    messages[index] = message
    return message


def thinking_off_retry(body: dict[str, Any], kind: Kind, dialect: str, effort: str,
                       notice: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The retry of ``body`` with thinking off in ``dialect`` and ``notice`` as the newest
    user text; and, when that added a thinking field the request never named, the same
    retry without it (what to send if the upstream rejects the field with a 400)."""
    retry = with_note(thinking_off(body, kind, dialect, effort), kind, notice)
    plain = with_note(body, kind, notice)
    added_field = retry != plain and requested_dialect(body, kind) == "none"
    return retry, plain if added_field else None


def with_note(body: dict[str, Any], kind: Kind, note: str) -> dict[str, Any]:
    """The request with ``note`` added as the newest user-side text the model reads."""
    body, messages = _forked(body)
    last = messages[-1] if messages else None
    if kind == "anthropic" and isinstance(last, dict) and last.get("role") == "user":
        last = _own(messages, len(messages) - 1)
        content = last.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        last["content"] = [*blocks, {"type": "text", "text": note}]
    else:
        messages.append({"role": "user", "content": note})
    return body


def with_denial(body: dict[str, Any], kind: Kind, calls: list[tuple[str, str, str]],
                reasons: dict[str, str]) -> dict[str, Any]:
    """The request extended with the model's denied tool calls and the denial each got, so
    the model re-plans knowing why."""
    body, messages = _forked(body)
    if kind == "openai":
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls]})
        for cid, _, _ in calls:
            messages.append({"role": "tool", "tool_call_id": cid, "content": reasons[cid]})
    else:
        blocks = []
        for cid, name, args in calls:
            try:
                value = json.loads(args) if args.strip() else {}
            except ValueError:
                value = {"arguments": args}
            blocks.append({"type": "tool_use", "id": cid, "name": name, "input": value})
        messages.append({"role": "assistant", "content": blocks})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": cid, "content": reasons[cid], "is_error": True}
            for cid, _, _ in calls]})
    return body


def without_unsigned_thinking(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic request without the thinking blocks the proxy cut: a cut block never got
    its signature, and the upstream would reject it coming back."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not any(
            isinstance(m, dict) and isinstance(m.get("content"), list)
            and any(_unsigned_thinking(b) for b in m["content"]) for m in messages):
        return body
    body, messages = _forked(body)
    for i, m in enumerate(messages):
        if isinstance(m, dict) and isinstance(m.get("content"), list) and any(
                _unsigned_thinking(b) for b in m["content"]):
            _own(messages, i)["content"] = [b for b in m["content"]
                                            if not _unsigned_thinking(b)]
    return body


def _unsigned_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking" \
        and not block.get("signature")


def session_key(headers: dict[str, str], body: dict[str, Any]) -> str:
    """What identifies a session for logs (hashed before it is logged): the client's session
    header when it sends one, else the first user message."""
    for name in ("x-deepseek-harness-session-id", "x-session-id", "session-id"):
        if headers.get(name):
            return headers[name]
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") == "user":
            return _text_of(m.get("content"))[:2000]
    return ""


def is_notice(text: str) -> bool:
    """Whether a text is one of the proxy's own notices."""
    return text.lstrip().startswith(_NOTICE_TAG)

"""Tool-call hooks for an agent loop you wrote yourself: no framework, no extra.

The rules (SPEC "tool-failure" and the README's tool rules): within one turn,
from the 2nd identical failure on, the failing result the model reads carries
guidance to change approach; once the same call (tool name + canonical
arguments) has failed 3 times, the next identical call is denied before it
runs, and the model reads why. The same holds for a call that returned the same
result 3 times, a cycle of calls that came round 3 times unchanged, and 3
different calls failing with the same error (those counts outlive the turn; a
user message gives each call one more try). The counts live in a
:class:`~loopbreak.SessionGuard`, one per conversation; call ``start_turn()``
when the user speaks.

:class:`ToolBreaker` runs one tool call through that rule: ask
``before_tool``, return the denial reason instead of running, run the tool,
decide whether it failed (it raised; or its text reads as a failure, see
:func:`looks_like_failure`), report it with ``after_tool``, and return the text
the model should read, guidance applied. ``guard_tool(fn, session)`` wraps
one tool function so that calling it does all that.

>>> breaker = ToolBreaker()
>>> def read(path: str) -> str:
...     raise FileNotFoundError(f"no such file: {path}")
>>> [breaker.run("read", '{"path": "a.py"}', read).ran for _ in range(4)]
[True, True, True, False]
>>> breaker.start_turn()  # the user spoke: one more try, then denied again
>>> [breaker.run("read", {"path": "a.py"}, read).ran for _ in range(2)]
[True, False]
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, overload

from loopbreak._engine.session_guard import SessionGuard
from loopbreak._engine.tool_failure import ToolGuidance, looks_like_failure

__all__ = ["FailureTest", "ToolBreaker", "ToolRun", "as_text", "error_text", "guard_tool"]

FailureTest = Callable[[str], bool]
"""Whether the text a tool returned reports a failure (default :func:`looks_like_failure`)."""

_P = ParamSpec("_P")


def as_text(value: Any) -> str:
    """What the model reads of a tool's return value: text as it is, ``None`` as ``""``,
    anything else as JSON (``str()`` for what JSON cannot hold)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular, or a key JSON cannot hold
        return str(value)


def error_text(exc: BaseException) -> str:
    """How a raised exception reads as a tool result: ``FileNotFoundError: no such file``."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


@dataclass(frozen=True)
class ToolRun:
    """One tool call as it went through the breaker."""

    text: str
    """What the model should read: the result (guidance applied), the error, or the denial."""
    ran: bool
    """``False``: denied before dispatch, the tool did not run."""
    failed: bool
    """The tool raised, or its result read as a failure (always ``False`` when denied)."""
    value: Any = None
    """What the tool returned (``None`` when it raised or was denied)."""
    error: BaseException | None = None
    """What the tool raised, if it did."""
    guidance: ToolGuidance | None = None
    """The guidance put into ``text``, if any."""


def _parse(arguments: Mapping[str, Any] | str | bytes | None) -> dict[str, Any]:
    """Keyword arguments for the tool: a mapping as it is, JSON text parsed to an object."""
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    text = arguments.decode() if isinstance(arguments, bytes) else arguments
    parsed = json.loads(text) if text.strip() else {}
    if not isinstance(parsed, dict):
        raise TypeError(f"tool arguments must be a JSON object: {text[:200]!r}")
    return parsed


def _bound_arguments(fn: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    """The arguments of a direct call by parameter name, as the model would have sent them."""
    try:
        return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):  # no signature, or a call the tool will refuse itself
        return {"args": list(args), **kwargs}


class ToolBreaker:
    """The tool-failure rule of one conversation, around the tools of your own loop.

    ``session`` holds the counts (a fresh :class:`~loopbreak.SessionGuard` when
    omitted; pass yours to share it with the stream guards of the same
    conversation). ``is_failure`` judges a returned result's text.
    """

    def __init__(self, session: SessionGuard | None = None, *,
                 is_failure: FailureTest = looks_like_failure) -> None:
        self.session = session if session is not None else SessionGuard()
        self.is_failure = is_failure

    def start_turn(self) -> None:
        """A new user turn: failure counts and denials start over."""
        self.session.start_turn()

    def run(self, name: str, arguments: Mapping[str, Any] | str | bytes | None,
            fn: Callable[..., Any]) -> ToolRun:
        """Run ``fn(**arguments)`` as the model's call of tool ``name``.

        ``arguments`` are what the model sent: a mapping, or its JSON text as
        OpenAI-style messages carry it. An exception is the call's failure and its
        text is what the model reads (arguments that are not a JSON object fail
        the same way). For a coroutine function use :meth:`arun`.
        """
        return self._call(name, arguments, lambda: fn(**_parse(arguments)))

    async def arun(self, name: str, arguments: Mapping[str, Any] | str | bytes | None,
                   fn: Callable[..., Any]) -> ToolRun:
        """:meth:`run` for an async loop; ``fn`` may be sync or async."""
        return await self._acall(name, arguments, lambda: fn(**_parse(arguments)))

    @overload
    def wrap(self, fn: Callable[_P, Awaitable[Any]], *,
             name: str | None = None) -> Callable[_P, Awaitable[str]]: ...

    @overload
    def wrap(self, fn: Callable[_P, Any], *, name: str | None = None) -> Callable[_P, str]: ...

    def wrap(self, fn: Callable[_P, Any], *,
             name: str | None = None) -> Callable[_P, str] | Callable[_P, Awaitable[str]]:
        """``fn`` behind the breaker, called as before; it returns the text the model should
        read (awaited for a coroutine function). The call's arguments are keyed by parameter
        name, as the model sends them. ``name`` defaults to ``fn.__name__``."""
        tool: str = name or getattr(fn, "__name__", None) or "tool"
        if inspect.iscoroutinefunction(fn):
            async def call_async(*args: _P.args, **kwargs: _P.kwargs) -> str:
                key = _bound_arguments(fn, args, kwargs)
                return (await self._acall(tool, key, lambda: fn(*args, **kwargs))).text

            return functools.wraps(fn)(call_async)

        def call(*args: _P.args, **kwargs: _P.kwargs) -> str:
            key = _bound_arguments(fn, args, kwargs)
            return self._call(tool, key, lambda: fn(*args, **kwargs)).text

        return functools.wraps(fn)(call)

    # one call: ask, run, judge, report

    def _call(self, name: str, arguments: Any, invoke: Callable[[], Any]) -> ToolRun:
        decision = self.session.before_tool(name, arguments)
        if not decision.allowed:
            return ToolRun(decision.reason or "", ran=False, failed=False)
        try:
            value = invoke()
        except Exception as exc:
            return self._raised(name, arguments, exc)
        return self._returned(name, arguments, value)

    async def _acall(self, name: str, arguments: Any, invoke: Callable[[], Any]) -> ToolRun:
        decision = self.session.before_tool(name, arguments)
        if not decision.allowed:
            return ToolRun(decision.reason or "", ran=False, failed=False)
        try:
            value = invoke()
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            return self._raised(name, arguments, exc)
        return self._returned(name, arguments, value)

    def _raised(self, name: str, arguments: Any, exc: Exception) -> ToolRun:
        text = error_text(exc)
        guidance = self.session.after_tool(name, arguments, text, failed=True,
                                           error_code=type(exc).__name__)
        return ToolRun(guidance.apply(text) if guidance else text, ran=True, failed=True,
                       error=exc, guidance=guidance)

    def _returned(self, name: str, arguments: Any, value: Any) -> ToolRun:
        text = as_text(value)
        failed = self.is_failure(text)
        guidance = self.session.after_tool(name, arguments, text, failed=failed)
        return ToolRun(guidance.apply(text) if guidance else text, ran=True, failed=failed,
                       value=value, guidance=guidance)


@overload
def guard_tool(fn: Callable[_P, Awaitable[Any]],
               session: SessionGuard | None = None, *, name: str | None = None,
               is_failure: FailureTest = looks_like_failure) -> Callable[_P, Awaitable[str]]: ...


@overload
def guard_tool(fn: Callable[_P, Any], session: SessionGuard | None = None, *,
               name: str | None = None,
               is_failure: FailureTest = looks_like_failure) -> Callable[_P, str]: ...


def guard_tool(fn: Callable[_P, Any], session: SessionGuard | None = None, *,
               name: str | None = None, is_failure: FailureTest = looks_like_failure
               ) -> Callable[_P, str] | Callable[_P, Awaitable[str]]:
    """``fn`` behind the tool-failure rule of ``session``: see :meth:`ToolBreaker.wrap`."""
    return ToolBreaker(session, is_failure=is_failure).wrap(fn, name=name)

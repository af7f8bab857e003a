"""The LiteLLM proxy hook: every chat-completions stream through a LiteLLM proxy, guarded.

:class:`LoopbreakGuard` is a LiteLLM ``CustomLogger`` whose
``async_post_call_streaming_iterator_hook`` wraps the chunks of each streamed
response. Chunks pass on as they come, judged by a fresh call guard per
stream. When a rule trips, the hook stops reading the upstream, closes it
(LiteLLM then closes the connection to the model server, which stops
generation and billing there), and ends the stream lawfully: a last chunk
carrying the ``[loopbreak] ...`` notice as content with ``finish_reason``
``"stop"`` (``"tool_calls"`` when the call had streamed tool calls, which are
complete by then: a cut never lands inside an open tool call). The client and,
through its history, the model read the notice. Non-streamed responses are not
touched, nor are streams that are not chat-completions chunks (they carry no
``choices``).

With ``recovery.on_trip = "retry"`` (the default), a reasoning loop is first
re-asked once per turn the way ``loopbreak proxy`` does it: the notice goes out
as content, the same request (with the notice added as the newest user text)
is sent again with thinking disabled in the model's dialect, through the
LiteLLM proxy's router when the hook runs inside one, and its answer continues
the same client stream, judged like the first. "Once per turn" is read from
the request's history (the notices of earlier cuts are in it).

Its ``async_pre_call_hook`` judges each chat request's history as the proxy
does: tool-failure guidance in this turn's failing results, the stall rule's
reaction; a tool call that must not run again is held back while it streams
and, once whole, not relayed: the model is asked once more with the denial.

Load it from the LiteLLM config file::

    litellm_settings:
      callbacks: ["loopbreak.integrations.litellm.guard"]

The guard's configuration is ``loopbreak.load_config()``: ``$LOOPBREAK_CONFIG``
and ``LOOPBREAK_*`` variables; the config file can name the TOML file itself::

    callback_settings:
      loopbreak:
        config: /etc/loopbreak.toml

Needs the ``litellm`` extra (``pip install '.[litellm]'`` from a checkout).
"""

from __future__ import annotations

import collections
import copy
import inspect
import logging
import os
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from loopbreak._extras import missing

try:
    import litellm
    from litellm.integrations.custom_logger import CustomLogger
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing(__name__, "litellm", "litellm", exc) from exc

from loopbreak._config import Config, load_config
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.notices import Language, resolve_language
from loopbreak._engine.trip import Trip
from loopbreak._recovery import LoopCutError, cut_notice, normal_finish, plan_cut, plan_denial
from loopbreak._recovery.chunks import carries_tool_calls, feed_openai_chunk, field
from loopbreak._recovery.history import (
    HistoryView,
    ReplayCheckpoints,
    replay,
    with_denial,
    with_guidance,
    with_note,
)
from loopbreak._recovery.requests import conversation_sample, thinking_off

__all__ = ["SETTINGS_KEY", "LoopbreakGuard", "denial_request", "guard", "retry_request"]

SETTINGS_KEY = "loopbreak"
"""The hook's own section under ``callback_settings`` in the LiteLLM config file."""

log = logging.getLogger("loopbreak.litellm")


def _conversation_sample(request_data: Mapping[str, Any]) -> str:
    """The text of the request's messages (the latest last), for the notice's language."""
    return conversation_sample(request_data.get("messages"))


def _tool_deltas(chunk: Any) -> list[Any]:
    out: list[Any] = []
    for choice in field(chunk, "choices") or []:
        delta = field(choice, "delta")
        if delta is not None:
            out.extend(field(delta, "tool_calls") or [])
    return out


def _finishes(chunk: Any) -> bool:
    return any(field(choice, "finish_reason") for choice in field(chunk, "choices") or [])


def _without_finish(chunk: Any) -> Any:
    """A copy of ``chunk`` whose choices carry no ``finish_reason``."""
    copied = chunk.model_copy(deep=True) if hasattr(chunk, "model_copy") else copy.deepcopy(chunk)
    for choice in field(copied, "choices") or []:
        if isinstance(choice, dict):
            choice["finish_reason"] = None
        else:
            choice.finish_reason = None
    return copied


def _final_chunk(template: Any, text: str | None, finish: str | None) -> ModelResponseStream:
    """The chunk that ends a cut stream: ``text`` (if any) and ``finish``, with the id,
    creation time and model of ``template``; with no ``finish`` the stream goes on."""
    return ModelResponseStream(
        id=field(template, "id") or None,
        created=field(template, "created") or None,
        model=field(template, "model") or None,
        choices=[StreamingChoices(index=0, delta=Delta(content=text) if text else Delta(),
                                  finish_reason=finish)],
    )


async def _close(response: Any) -> None:
    """Close the upstream iterator: LiteLLM's stream wrapper closes its connection."""
    closer = getattr(response, "aclose", None) or getattr(response, "close", None)
    if not callable(closer):
        return
    try:
        result = closer()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:  # the stream must still end lawfully
        log.warning("closing the upstream stream after a cut failed: %r", exc)


# What LiteLLM's proxy adds to a request for its own bookkeeping of one call: a re-ask is a
# call of its own and gets fresh ones. ``stream_options`` is LiteLLM's own unless the client
# asked for usage (then ``_litellm_strip_stream_usage`` is false).
_NOT_FORWARDED = frozenset({"litellm_logging_obj", "litellm_call_id", "deployment",
                            "secret_fields", "stream_options"})
# How many pre-call judgements wait for the stream of their call, and for how long: a stream
# starts right after its pre-call hook, so one not started by then never will.
_VIEWS_KEPT = 1024
_VIEW_SECONDS = 600.0
# The call types of LiteLLM's chat routes; other routes carry no chat history to judge.
_CHAT_CALLS = frozenset({"completion", "acompletion"})
# Where a request says how the model thinks; OpenAI-compatible servers read them from the body.
_THINKING_KEYS = ("thinking", "chat_template_kwargs", "think", "reasoning", "reasoning_effort")


def _provider_dialect(request_data: Mapping[str, Any]) -> str:
    """The thinking dialect of the model LiteLLM routes to, from its ``provider/model`` name:
    used when neither the configuration nor the request says."""
    params = getattr(request_data.get("deployment"), "litellm_params", None)
    model = str(getattr(params, "model", None) or request_data.get("model") or "").lower()
    provider = model.split("/", 1)[0] if "/" in model else ""
    if provider in ("anthropic", "bedrock", "vertex_ai") and "claude" in model:
        return "anthropic"
    if provider in ("hosted_vllm", "vllm", "sglang"):
        return "vllm"
    if provider.startswith("ollama"):
        return "ollama"
    if "deepseek" in model:
        return "deepseek"
    return "none"


def _forwarded(request_data: Mapping[str, Any]) -> dict[str, Any]:
    """What a request of the hook's own sends of ``request_data``: the client's parameters,
    without LiteLLM's bookkeeping of the first call."""
    body = {k: v for k, v in request_data.items()
            if k not in _NOT_FORWARDED and not k.startswith("_")}
    if request_data.get("stream_options") and not request_data.get("_litellm_strip_stream_usage"):
        body["stream_options"] = request_data["stream_options"]
    body["stream"] = True
    return body


def denial_request(request_data: Mapping[str, Any], calls: list[tuple[str, str, str]],
                   reasons: dict[str, str]) -> dict[str, Any]:
    """The keyword arguments that re-ask ``request_data`` after the model's tool ``calls``
    (id, name, arguments) were denied: the calls and the reason each was not run are added
    to the history, so the model re-plans knowing why."""
    body = _forwarded(request_data)
    body["messages"] = with_denial({"messages": body.get("messages") or []}, "openai", calls,
                                   reasons)["messages"]
    return body


def retry_request(request_data: Mapping[str, Any], notice: str,
                  config: Config | None = None) -> dict[str, Any]:
    """The keyword arguments that re-ask ``request_data`` (what LiteLLM's proxy handed the
    hook) without thinking, with ``notice`` as the newest user text.

    The dialect is ``recovery.dialect``; ``auto`` reads the request, then the provider of the
    model (``anthropic/...``: Anthropic's ``thinking``; ``hosted_vllm/...``:
    ``chat_template_kwargs``; ``ollama/...``: ``think``; a DeepSeek model: ``thinking``).
    LiteLLM takes ``reasoning_effort`` (and, for Anthropic, ``thinking``) by name; the
    rest rides in ``extra_body`` to the OpenAI-compatible server.
    """
    config = config or Config()
    body = _forwarded(request_data)
    said = dict(body.pop("extra_body", None) or {})
    said.update({k: body.pop(k) for k in _THINKING_KEYS if k in body})
    dialect = config.recovery.dialect
    if dialect == "auto":
        # Anthropic's models take ``thinking`` by name whatever the request says; other
        # requests that name a thinking key are read as they are.
        provider = _provider_dialect(request_data)
        if provider == "anthropic" or not any(k in said for k in _THINKING_KEYS):
            dialect = provider
    said = thinking_off(said, "openai", dialect, config.recovery.retry_effort)
    named = ("reasoning_effort", "thinking") if dialect == "anthropic" else ("reasoning_effort",)
    body.update({k: said.pop(k) for k in named if k in said})
    if said:
        body["extra_body"] = said
    # Only the messages are copied: the rest may hold live objects (LiteLLM's HTTP session).
    body["messages"] = with_note({"messages": body.get("messages") or []}, "openai",
                                 notice)["messages"]
    return body


async def _reissue(kwargs: dict[str, Any]) -> Any:
    """Send a re-ask the way the proxy sends requests: through its router (model aliases,
    keys, fallbacks) when the hook runs inside the LiteLLM proxy, else ``litellm.acompletion``."""
    server = sys.modules.get("litellm.proxy.proxy_server")
    router = getattr(server, "llm_router", None)
    if router is not None:
        return await router.acompletion(**kwargs)
    return await litellm.acompletion(**kwargs)


class LoopbreakGuard(CustomLogger):
    """A LiteLLM callback that cuts looping streams lawfully.

    ``config`` fixes the configuration; otherwise ``config_path`` names a TOML
    file; otherwise the LiteLLM config's ``callback_settings: loopbreak: config:``
    does; otherwise ``loopbreak.load_config()`` decides (``$LOOPBREAK_CONFIG``,
    ``LOOPBREAK_*`` variables, defaults). It is read once, at the first request.
    ``trips`` holds the latest trips (at most ``keep_trips``), newest last.
    ``reissue`` sends a re-ask (the keyword arguments of ``litellm.acompletion``) and
    returns its stream; by default the LiteLLM proxy's router, else ``litellm.acompletion``.
    """

    def __init__(self, config: Config | None = None, *,
                 config_path: str | os.PathLike[str] | None = None,
                 keep_trips: int = 100,
                 reissue: Callable[[dict[str, Any]], Awaitable[Any]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._config = config
        self._config_path = config_path
        self._reissue = reissue or _reissue
        self.trips: collections.deque[Trip] = collections.deque(maxlen=keep_trips)
        # The history as the client sent it, judged before the pre-call hook put guidance
        # into it, by LiteLLM's call id, for the stream of the same call: kept for streamed
        # calls only, without the stall rule's gram set, at most _VIEWS_KEPT of them for at
        # most _VIEW_SECONDS (with the time each was kept).
        self._views: collections.OrderedDict[str, tuple[float, HistoryView]] = \
            collections.OrderedDict()
        # Where each session's last replay left off: its next request replays what is new.
        self._replays = ReplayCheckpoints()

    @property
    def config(self) -> Config:
        """The configuration every stream is judged with (loaded on first use)."""
        if self._config is None:
            path = self._config_path
            if path is None:
                settings = (getattr(litellm, "callback_settings", None) or {}).get(SETTINGS_KEY)
                if isinstance(settings, Mapping) and settings.get("config"):
                    path = str(settings["config"])
            self._config = load_config(path).config
        return self._config

    def notice(self, trip: Trip, request_data: Mapping[str, Any] | None = None) -> str:
        """What the client and the model read about ``trip``, in the conversation's language."""
        return cut_notice(trip, self._language(request_data or {}))

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any],
                                  call_type: Any) -> dict[str, Any] | str:
        """Before a chat request leaves the proxy, judge its history as ``loopbreak proxy``
        does: the tool rules' guidance goes into the results it concerns, and the stall and
        monologue rules' reaction applies (``steer``: a note as the newest user text;
        ``cancel``: the notice, which LiteLLM then returns as the model's whole answer)."""
        messages = data.get("messages")
        if call_type not in _CHAT_CALLS or not isinstance(messages, list):
            return data
        config = self.config
        view = replay({"messages": messages}, "openai", config, self._replays)
        call_id = data.get("litellm_call_id")
        if isinstance(call_id, str) and data.get("stream") is True:
            self._keep_view(call_id, view)
        messages = with_guidance({"messages": messages}, view)["messages"]
        reaction = view.reaction
        if reaction is not None:
            log.warning("loopbreak: the %s rule fired on %s: %s", reaction.rule,
                        data.get("model", "?"), reaction.kind)
            if reaction.kind == "cancel":
                return reaction.notice
            if reaction.kind == "steer":
                messages = with_note({"messages": messages}, "openai", reaction.notice)["messages"]
        data["messages"] = messages
        return data

    def _language(self, request_data: Mapping[str, Any]) -> Language:
        return resolve_language(self.config.recovery.language,
                                _conversation_sample(request_data))

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any],
    ) -> AsyncGenerator[Any, None]:
        """Pass the chunks of one stream on as they come; end it lawfully on a trip, after
        one re-ask without thinking where that is configured. A tool call the history says
        must not run again is held back until the call is whole, then not relayed: the model
        is asked once more with the denial as context (if it insists, the stream ends with
        the reason)."""
        config = self.config
        view = self._view(request_data)
        stream: AsyncIterator[Any] = response
        retried = reasked = False
        try:
            while True:
                call = CallGuard(config)
                trip: Trip | None = None
                chunk: Any = None
                held: list[Any] | None = None  # chunks kept back for a denial check
                ids: dict[Any, str] = {}
                tools_sent = False
                denied: dict[str, str] = {}
                async for chunk in stream:
                    trip = feed_openai_chunk(call, chunk)
                    if trip is not None:
                        break
                    deltas = _tool_deltas(chunk)
                    for delta in deltas:
                        key, tool_id = field(delta, "index"), field(delta, "id")
                        if isinstance(tool_id, str) and tool_id:
                            ids[key if key is not None else tool_id] = tool_id
                    if held is None and view is not None and any(
                            view.may_deny(r.name) for r in call.tool_calls):
                        held = []
                    if held is None:
                        tools_sent = tools_sent or bool(deltas)
                        yield chunk
                        continue
                    held.append(chunk)
                    if _finishes(chunk):
                        break
                calls = [(self._call_id(r.key, ids), r.name, r.arguments)
                         for r in call.tool_calls]
                if trip is None and held is not None and view is not None:
                    denied = {cid: reason for cid, name, args in calls
                              if (reason := view.denied(name, args)) is not None}
                    if not denied:
                        for kept in held:
                            yield kept
                        async for rest in stream:  # what follows the finish (usage)
                            yield rest
                        return
                elif trip is None:
                    return
                # Stop reading, and close: that is what stops generation upstream.
                await _close(stream)
                if trip is None:
                    # A held call was denied: it is not relayed; the model plans again.
                    denial = plan_denial([cid for cid, _, _ in calls], denied, reasked=reasked)
                    log.warning("loopbreak denied a repeated failing tool call of %s",
                                request_data.get("model", "?"))
                    if not denial.reask:
                        yield _final_chunk(chunk, denial.reason, normal_finish("openai"))
                        return
                    reasked = True
                    again = await self._reask(denial_request(request_data, calls,
                                                             denial.reasons), "after a denial")
                    if again is None:
                        yield _final_chunk(chunk, denial.reason, normal_finish("openai"))
                        return
                    stream = again
                    continue
                self.trips.append(trip)
                log.warning("loopbreak cut a looping %s stream of %s (%s) after %s characters",
                            trip.channel, request_data.get("model", "?"), trip.rule,
                            f"{trip.offset:,}")
                if held is None and carries_tool_calls(chunk):
                    # This chunk completes a tool call (its finish released the trip): it goes
                    # out, without its finish.
                    tools_sent = True
                    yield _without_finish(chunk)
                # The turn's retries as the history shows them (each left its notice), and
                # this stream's own; a request without a chat history cannot be re-asked.
                used = (view.cuts_this_turn if view is not None
                        else config.recovery.retries_per_turn) + (1 if retried else 0)
                plan = plan_cut(trip, config, language=self._language(request_data),
                                retries_used=used, tools_sent=tools_sent)
                if plan.mode == "error":
                    raise LoopCutError(trip, plan.notice)
                if plan.mode == "retry":
                    retried = True
                    # The notice goes out first: the client's history keeps it, which is how the
                    # next request of this turn knows a retry was spent.
                    if plan.shown:
                        yield _final_chunk(chunk, plan.shown + "\n\n", None)
                    again = await self._reask(retry_request(request_data, plan.notice, config),
                                              "without thinking")
                    if again is None:
                        yield _final_chunk(chunk, None, normal_finish("openai"))
                        return
                    stream = again
                    continue
                yield _final_chunk(chunk, plan.shown or None, plan.finish)
                return
        finally:
            # A re-ask is this hook's own stream: a client that leaves mid-answer must not
            # leave it generating.
            if stream is not response:
                await _close(stream)

    async def _reask(self, kwargs: dict[str, Any], what: str) -> AsyncIterator[Any] | None:
        """The stream of a re-ask, or ``None`` (logged) when it could not be sent: the client's
        stream must still end lawfully."""
        try:
            stream: AsyncIterator[Any] = await self._reissue(kwargs)
        except Exception as exc:
            log.warning("loopbreak's re-ask %s failed: %r", what, exc)
            return None
        return stream

    def _view(self, request_data: Mapping[str, Any]) -> HistoryView | None:
        """The request's history replayed: the pre-call hook's judgement of the history as
        the client sent it, else the history as it is here."""
        call_id = request_data.get("litellm_call_id")
        kept = self._views.pop(call_id, None) if isinstance(call_id, str) else None
        if kept is not None:
            return kept[1]
        messages = request_data.get("messages")
        if not isinstance(messages, list):
            return None
        return replay({"messages": messages}, "openai", self.config)

    def _keep_view(self, call_id: str, view: HistoryView) -> None:
        # The stream needs the tool breaker, the turn's cuts and the language, not the
        # stall rule's memory of the last call (megabytes with a long reasoning).
        view.session.forget_grams()
        now = time.monotonic()
        views = self._views
        views[call_id] = (now, view)
        views.move_to_end(call_id)
        while views and (len(views) > _VIEWS_KEPT
                         or now - next(iter(views.values()))[0] > _VIEW_SECONDS):
            views.popitem(last=False)

    @staticmethod
    def _call_id(key: Any, ids: Mapping[Any, str]) -> str:
        return ids.get(key) or f"call_loopbreak_{key}"


guard = LoopbreakGuard()
"""The instance a LiteLLM config names: ``callbacks: ["loopbreak.integrations.litellm.guard"]``."""

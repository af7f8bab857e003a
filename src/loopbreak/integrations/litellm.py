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

Load it from the LiteLLM config file::

    litellm_settings:
      callbacks: ["loopbreak.integrations.litellm.guard"]

The guard's configuration is ``loopbreak.load_config()``: ``$LOOPBREAK_CONFIG``
and ``LOOPBREAK_*`` variables; the config file can name the TOML file itself::

    callback_settings:
      loopbreak:
        config: /etc/loopbreak.toml

Needs the ``litellm`` extra (``pip install 'loopbreak[litellm]'``).
"""

from __future__ import annotations

import collections
import copy
import inspect
import logging
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import litellm
from litellm.integrations.custom_logger import CustomLogger
from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

from loopbreak._config import Config, load_config
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.notices import render, resolve_language
from loopbreak._engine.trip import Trip
from loopbreak.integrations._deltas import feed_openai_chunk, field

__all__ = ["SETTINGS_KEY", "LoopbreakGuard", "guard"]

SETTINGS_KEY = "loopbreak"
"""The hook's own section under ``callback_settings`` in the LiteLLM config file."""

log = logging.getLogger("loopbreak.litellm")


def _conversation_sample(request_data: Mapping[str, Any]) -> str:
    """The text of the request's messages (the latest last), for the notice's language."""
    parts: list[str] = []
    for message in request_data.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(part["text"] for part in content
                         if isinstance(part, Mapping) and isinstance(part.get("text"), str))
    return "\n".join(parts)[-4000:]


def _carries_tool_calls(chunk: Any) -> bool:
    for choice in field(chunk, "choices") or []:
        delta = field(choice, "delta")
        if delta is not None and field(delta, "tool_calls"):
            return True
    return False


def _without_finish(chunk: Any) -> Any:
    """A copy of ``chunk`` whose choices carry no ``finish_reason``."""
    copied = chunk.model_copy(deep=True) if hasattr(chunk, "model_copy") else copy.deepcopy(chunk)
    for choice in field(copied, "choices") or []:
        if isinstance(choice, dict):
            choice["finish_reason"] = None
        else:
            choice.finish_reason = None
    return copied


def _final_chunk(template: Any, text: str | None, finish: str) -> ModelResponseStream:
    """The chunk that ends a cut stream: ``text`` (if any) and ``finish``, with the id,
    creation time and model of ``template``."""
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


class LoopbreakGuard(CustomLogger):
    """A LiteLLM callback that cuts looping streams lawfully.

    ``config`` fixes the configuration; otherwise ``config_path`` names a TOML
    file; otherwise the LiteLLM config's ``callback_settings: loopbreak: config:``
    does; otherwise ``loopbreak.load_config()`` decides (``$LOOPBREAK_CONFIG``,
    ``LOOPBREAK_*`` variables, defaults). It is read once, at the first stream.
    ``trips`` holds the latest trips (at most ``keep_trips``), newest last.
    """

    def __init__(self, config: Config | None = None, *,
                 config_path: str | os.PathLike[str] | None = None,
                 keep_trips: int = 100, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._config = config
        self._config_path = config_path
        self.trips: collections.deque[Trip] = collections.deque(maxlen=keep_trips)

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
        language = resolve_language(self.config.recovery.language,
                                    _conversation_sample(request_data or {}))
        name = "cut.reasoning" if trip.channel == "reasoning" else "cut.text"
        return render(name, language, chars=f"{trip.offset:,}", rule=trip.rule)

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any],
    ) -> AsyncGenerator[Any, None]:
        """Pass the chunks of one stream on as they come; end it lawfully on a trip."""
        config = self.config
        call = CallGuard(config)
        async for chunk in response:
            trip = feed_openai_chunk(call, chunk)
            if trip is None:
                yield chunk
                continue
            # Stop reading, and close: that is what stops generation upstream.
            await _close(response)
            self.trips.append(trip)
            log.warning("loopbreak cut a looping %s stream of %s (%s) after %s characters",
                        trip.channel, request_data.get("model", "?"), trip.rule,
                        f"{trip.offset:,}")
            if _carries_tool_calls(chunk):
                # This chunk completes a tool call (its finish released the trip): it goes
                # out, without its finish.
                yield _without_finish(chunk)
            notice = self.notice(trip, request_data) if config.recovery.notice else None
            yield _final_chunk(chunk, notice, "tool_calls" if call.tool_calls else "stop")
            return


guard = LoopbreakGuard()
"""The instance a LiteLLM config names: ``callbacks: ["loopbreak.integrations.litellm.guard"]``."""

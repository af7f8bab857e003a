"""A scripted model upstream for tests, demos and driving real clients.

:class:`ScriptedUpstream` is a real HTTP/1.1 server on 127.0.0.1 that speaks the
OpenAI ``chat/completions`` and Anthropic ``messages`` wire formats byte for
byte and answers each request with a :class:`Script`: content (reasoning, text,
tool calls, usage, finish reason), how it is delivered (write sizes that split
UTF-8 characters, keep-alive comments, delays), and misbehaviour on demand
(error statuses, broken JSON, early closes, stalls). Every request is recorded
with how its exchange ended. Standard library only.

Example::

    import openai
    from loopbreak.testing import Script, ScriptedUpstream

    script = Script.openai(reasoning="Let me think.", text="Hello!").delivered(write_bytes=1)
    with ScriptedUpstream([script]) as upstream:
        client = openai.OpenAI(base_url=upstream.base_url, api_key="sk-test")
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        record = upstream.requests[0]
        # The client can read the last byte before the server books the exchange.
        assert record.wait(2) and record.outcome == "completed"
    assert text == "Hello!"
"""

from __future__ import annotations

from loopbreak.testing._script import (
    DEFAULT_SIGNATURE,
    At,
    CloseHow,
    Delivery,
    Dialect,
    Event,
    Flavour,
    Reasoning,
    Script,
    Text,
    ToolCall,
    Usage,
    split_chars,
)
from loopbreak.testing._wire import (
    Context,
    WireEvent,
    anthropic_body,
    anthropic_events,
    error_body,
    openai_body,
    openai_events,
)
from loopbreak.testing.upstream import Chooser, Outcome, RecordedRequest, ScriptedUpstream

__all__ = [
    "DEFAULT_SIGNATURE",
    "At",
    "Chooser",
    "CloseHow",
    "Context",
    "Delivery",
    "Dialect",
    "Event",
    "Flavour",
    "Outcome",
    "Reasoning",
    "RecordedRequest",
    "Script",
    "ScriptedUpstream",
    "Text",
    "ToolCall",
    "Usage",
    "WireEvent",
    "anthropic_body",
    "anthropic_events",
    "error_body",
    "openai_body",
    "openai_events",
    "split_chars",
]

# Show public classes as ``loopbreak.testing.X``, not as the private module they live in.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._") and isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj

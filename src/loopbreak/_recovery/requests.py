"""Request bodies, changed the way a recovery needs: thinking turned off per dialect.

Pure functions on the JSON body of a chat-completions or messages request,
shared by the proxy and the in-process integrations (no HTTP here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from loopbreak._engine.notices import LANGUAGE_SAMPLE_CHARS

DIALECTS = ("auto", "deepseek", "anthropic", "vllm", "ollama", "openai", "none")


def requested_dialect(body: dict[str, Any],
                      kind: Literal["openai", "anthropic"] = "openai") -> str:
    """The thinking dialect a request names by the fields it sends; ``none`` when it names
    none (the upstream's own default is then unknown from the request alone)."""
    if kind == "anthropic":
        return "anthropic"
    if "thinking" in body:
        return "deepseek"
    if "chat_template_kwargs" in body:
        return "vllm"
    if "think" in body:
        return "ollama"
    if "reasoning_effort" in body or "reasoning" in body:
        return "openai"
    return "none"


def dialect_of_upstream(host: str, owned_by: str = "") -> str:
    """The thinking dialect of an upstream judged from its host name and the ``owned_by``
    its ``GET /v1/models`` reports (vLLM says ``vllm``, SGLang ``sglang``, llama.cpp
    ``llamacpp``, Ollama ``library``, DeepSeek ``deepseek``, OpenAI ``system`` or
    ``openai``); ``none`` when neither tells."""
    owner = owned_by.strip().lower()
    if owner in ("vllm", "sglang", "llamacpp", "llama.cpp"):
        return "vllm"  # chat_template_kwargs: enable_thinking
    if owner == "deepseek":
        return "deepseek"
    if owner in ("ollama", "library"):
        return "ollama"
    if owner in ("openai", "system", "openai-internal"):
        return "openai"
    name = host.lower().rsplit(":", 1)
    domain = name[0]
    if domain.endswith("deepseek.com"):
        return "deepseek"
    if domain.endswith("anthropic.com"):
        return "anthropic"
    if domain.endswith("openai.com"):
        return "openai"
    if len(name) == 2 and name[1] == "11434":
        return "ollama"
    return "none"


def thinking_off(body: dict[str, Any], kind: Literal["openai", "anthropic"] = "openai",
                 dialect: str = "auto", effort: str = "low") -> dict[str, Any]:
    """The request with thinking disabled in the upstream's dialect.

    ``dialect`` ``auto`` reads it from the request: ``thinking`` (DeepSeek, Anthropic),
    ``chat_template_kwargs`` (vLLM, SGLang), ``think`` (Ollama), ``reasoning_effort``
    (OpenAI); a request that names none is left to the model's default.
    """
    # Only top-level fields change, each replaced whole: the history is shared, not copied.
    body = dict(body)
    chosen = requested_dialect(body, kind) if dialect == "auto" else dialect
    if chosen in ("deepseek", "anthropic"):
        body["thinking"] = {"type": "disabled"}
        body.pop("reasoning_effort", None)
    elif chosen == "vllm":
        kwargs = body.get("chat_template_kwargs")
        kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
        kwargs.update({"enable_thinking": False, "thinking": False})
        body["chat_template_kwargs"] = kwargs
    elif chosen == "ollama":
        body["think"] = False
    elif chosen == "openai":
        if "reasoning" in body and isinstance(body["reasoning"], dict):
            body["reasoning"] = {**body["reasoning"], "effort": effort}
        else:
            body["reasoning_effort"] = effort
    return body


def conversation_sample(messages: Any, limit: int = LANGUAGE_SAMPLE_CHARS) -> str:
    """The text of a request's messages, the latest last, at most ``limit`` characters: what
    a notice's language is read from when the language is ``auto``."""
    parts: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(part["text"] for part in content
                         if isinstance(part, Mapping) and isinstance(part.get("text"), str))
    return "\n".join(parts)[-limit:]

"""Request bodies, changed the way a recovery needs: thinking turned off per dialect.

Pure functions on the JSON body of a chat-completions or messages request,
shared by the proxy and the in-process integrations (no HTTP here).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

DIALECTS = ("auto", "deepseek", "anthropic", "vllm", "ollama", "openai", "none")


def thinking_off(body: dict[str, Any], kind: Literal["openai", "anthropic"] = "openai",
                 dialect: str = "auto", effort: str = "low") -> dict[str, Any]:
    """The request with thinking disabled in the upstream's dialect.

    ``dialect`` ``auto`` reads it from the request: ``thinking`` (DeepSeek, Anthropic),
    ``chat_template_kwargs`` (vLLM, SGLang), ``think`` (Ollama), ``reasoning_effort``
    (OpenAI); a request that names none is left to the model's default.
    """
    body = copy.deepcopy(body)
    chosen = dialect
    if dialect == "auto":
        if kind == "anthropic":
            chosen = "anthropic"
        elif "thinking" in body:
            chosen = "deepseek"
        elif "chat_template_kwargs" in body:
            chosen = "vllm"
        elif "think" in body:
            chosen = "ollama"
        elif "reasoning_effort" in body or "reasoning" in body:
            chosen = "openai"
        else:
            chosen = "none"
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

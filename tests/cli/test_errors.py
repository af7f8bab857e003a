"""Every path a command takes, given wrong (missing, a folder, not UTF-8, not TOML, a bad
value), and every optional library a command needs, missing: exit code 2 and one line on
stderr, ``loopbreak: error: ...``, that says what is wrong and, where there is one, what
fixes it. No traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopbreak._extras import install_hint
from loopbreak.cli import main

PREFIX = "loopbreak: error: "

# {missing}: no such file; {folder}: an empty folder; {garbage}: not UTF-8; {bad_toml}: not
# TOML; {bad_value}: TOML with a value out of range; {ok}: a short text file; {tmp}: the folder.
CONFIG_ERRORS = [
    ("{missing}", "config file not found: {missing} (`loopbreak config init {missing}` "
                  "writes one)"),
    ("{folder}", "cannot read config file {folder}: Is a directory"),
    ("{garbage}", "{garbage}: not UTF-8 text (byte 0)"),
    ("{bad_toml}", "{bad_toml}: invalid TOML: "),
    ("{bad_value}", "cycle.max_period must be an integer in 2..4096 (0 = off), not 1 "
                    "(from {bad_value})"),
]
CONFIG_COMMANDS = [
    ["scan", "{ok}"],
    ["analyze", "{ok}"],
    ["demo", "--json"],
    ["config", "show"],
    ["calibrate", "--cases"],
    ["proxy", "--upstream", "http://127.0.0.1:9"],
]
CASES = [
    pytest.param([*command, "--config", path], message, id=f"{command[0]}-config-{path[1:-1]}")
    for command in CONFIG_COMMANDS for path, message in CONFIG_ERRORS
] + [pytest.param(args, message, id=name) for name, args, message in [
    ("scan-missing", ["scan", "{missing}"],
     "1 of 1 streams could not be judged (first: {missing}: no such file)"),
    ("scan-folder", ["scan", "{folder}"],
     "1 of 1 streams could not be judged (first: {folder}: is a directory)"),
    ("scan-garbage", ["scan", "{garbage}"],
     "1 of 1 streams could not be judged (first: {garbage}:1: invalid UTF-8 at byte 0)"),
    ("analyze-missing", ["analyze", "{missing}"], "{missing}: no such file or directory"),
    ("analyze-empty-folder", ["analyze", "{folder}"],
     "no session logs or recordings under {folder}"),
    ("analyze-garbage", ["analyze", "{garbage}"],
     "1 of 1 files could not be read (first: {garbage}: invalid UTF-8 at byte 0)"),
    ("analyze-html-no-folder", ["analyze", "--html", "{tmp}/no/report.html", "{ok}"],
     "--html {tmp}/no/report.html: no folder {tmp}/no (create it first)"),
    ("analyze-html-folder", ["analyze", "--html", "{folder}", "{ok}"],
     "--html {folder}: a folder; name the file to write, e.g. {folder}/report.html"),
    ("calibrate-corpus-missing", ["calibrate", "--corpus", "{missing}"],
     "--corpus {missing}: no such folder (pass --corpus DIR or set LOOPBREAK_CORPUS to the "
     "folder that holds dsh-loop-guard/)"),
    ("calibrate-corpus-file", ["calibrate", "--corpus", "{ok}", "--cases"],
     "--corpus {ok}: not a folder (pass --corpus DIR or set LOOPBREAK_CORPUS"),
    ("calibrate-corpus-not-a-corpus", ["calibrate", "--corpus", "{folder}", "--loso"],
     "{folder} is not the shared corpus (no dsh-loop-guard/ in it): pass --corpus DIR or set "
     "LOOPBREAK_CORPUS"),
    ("calibrate-agents-corpus", ["calibrate", "--agents", "--corpus", "{folder}"],
     "--corpus is for the text sweeps; --agents reads the agent corpus (agent-corpus/, or set "
     "LOOPBREAK_AGENT_CORPUS)"),
    ("calibrate-sweeps-config", ["calibrate", "--config", "{ok}"],
     "--config applies to --cases and --agents"),
    ("calibrate-input-missing", ["calibrate", "--input", "{missing}"],
     "--input {missing}: no such file"),
    ("calibrate-input-folder", ["calibrate", "--input", "{folder}"],
     "--input {folder}: a folder, not a labelled JSONL file"),
    ("calibrate-input-garbage", ["calibrate", "--cases", "--input", "{garbage}"],
     "{garbage}: invalid UTF-8 at byte 0"),
    ("config-init-folder", ["config", "init", "{folder}"],
     "{folder}: a folder; name the file to write, e.g. {folder}/loopbreak.toml"),
    ("config-init-no-folder", ["config", "init", "{tmp}/no/loopbreak.toml"],
     "{tmp}/no/loopbreak.toml: no folder {tmp}/no (create it first)"),
    ("config-init-exists", ["config", "init", "{ok}"],
     "{ok} exists: pass --force to overwrite it, or name another file"),
    ("proxy-no-upstream", ["proxy"], "--upstream URL is required (or set LOOPBREAK_UPSTREAM)"),
]]


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for var in ("LOOPBREAK_CONFIG", "LOOPBREAK_UPSTREAM"):
        monkeypatch.delenv(var, raising=False)
    for var in ("LOOPBREAK_CORPUS", "LOOPBREAK_DEV_CORPUS", "LOOPBREAK_LOCAL_CORPUS"):
        monkeypatch.setenv(var, str(tmp_path / "no-corpus"))
    (tmp_path / "folder").mkdir()
    (tmp_path / "garbage.bin").write_bytes(b"\xff\xfe\x00 not text")
    (tmp_path / "bad.toml").write_text("[cycle\nmax_period = 600\n", encoding="utf-8")
    (tmp_path / "value.toml").write_text("[cycle]\nmax_period = 1\n", encoding="utf-8")
    (tmp_path / "ok.txt").write_text("A short answer.\n", encoding="utf-8")
    return {"tmp": str(tmp_path), "missing": str(tmp_path / "absent"),
            "folder": str(tmp_path / "folder"), "garbage": str(tmp_path / "garbage.bin"),
            "bad_toml": str(tmp_path / "bad.toml"), "bad_value": str(tmp_path / "value.toml"),
            "ok": str(tmp_path / "ok.txt")}


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX), err
    assert not lines[0].startswith(PREFIX + "unexpected"), err
    return lines[0][len(PREFIX):]


@pytest.mark.parametrize("args, message", CASES)
def test_a_wrong_path_is_one_line_and_exit_2(paths: dict[str, str], args: list[str],
                                             message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main([a.format(**paths) for a in args]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(message.format(**paths)), line


def test_a_missing_config_file_named_by_the_environment_says_so(
        paths: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LOOPBREAK_CONFIG", paths["missing"])
    assert main(["demo", "--json"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (f"config file not found: {paths['missing']} (named by $LOOPBREAK_CONFIG; "
                    f"`loopbreak config init {paths['missing']}` writes one)")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root reads files whatever their mode")
@pytest.mark.parametrize("args, message", [
    (["config", "show", "--config", "{locked}"], "cannot read config file {locked}: "
                                                 "Permission denied"),
    (["scan", "{locked}"], "1 of 1 streams could not be judged (first: {locked}"),
])
def test_an_unreadable_file_is_one_line(paths: dict[str, str], tmp_path: Path,
                                        args: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked.toml"
    locked.write_text("[cycle]\n", encoding="utf-8")
    locked.chmod(0)
    values = {**paths, "locked": str(locked)}
    assert main([a.format(**values) for a in args]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith(message.format(**values))


# A library made unimportable in a fresh interpreter, as if it were not installed.
LIBRARY_CASES = [
    pytest.param(["uvicorn"], ["proxy", "--upstream", "http://127.0.0.1:9"],
                 f"loopbreak proxy needs uvicorn: {install_hint('proxy')}", id="proxy-uvicorn"),
    pytest.param(["aiohttp"], ["proxy", "--upstream", "http://127.0.0.1:9"],
                 f"loopbreak proxy needs aiohttp: {install_hint('proxy')}", id="proxy-aiohttp"),
    pytest.param(["openai"], ["demo", "--proxy", "--no-live", "--speed", "0"],
                 f"demo --proxy streams with the openai SDK: {install_hint('proxy', 'openai')}",
                 id="demo-proxy-openai"),
    pytest.param(["zstandard"], ["analyze", "{tmp}/session.jsonl.zstd"],
                 "1 of 1 files could not be read (first: {tmp}/session.jsonl.zstd: reading a "
                 "compressed session log needs zstandard: pip install ",
                 id="analyze-zstd"),
]


@pytest.mark.parametrize("blocked, args, message", LIBRARY_CASES)
def test_a_missing_library_names_the_command_that_installs_it(
        tmp_path: Path, blocked: list[str], args: list[str], message: str) -> None:
    (tmp_path / "session.jsonl.zstd").write_bytes(b"\x28\xb5\x2f\xfd not really")
    code = ("import sys\n"
            f"for name in {blocked!r}:\n"
            "    sys.modules[name] = None\n"
            "from loopbreak.cli import main\n"
            f"sys.exit(main({[a.format(tmp=tmp_path) for a in args]!r}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPBREAK_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr)
    assert line.startswith(message.format(tmp=tmp_path)), line

"""``loopbreak config``: ``show`` prints valid TOML that loads back to the same values, and
``init`` writes a template of every key that loads to exactly the defaults."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopbreak._config import _SECTIONS, LoadedConfig, iter_keys, load_config, tomllib
from loopbreak.cli import main
from loopbreak.cli.config import init_template, toml_key, toml_value

KEYS = [key for key, _ in iter_keys()]
NON_DEFAULT = """\
[block_repeat]
novelty_streak_code = 0
enabled = false

[degeneracy]
min_ink_share = 0.125

[stall]
reaction = "warn"
cancel_cause = "say \\"no\\" \\\\ then\\ttab, 𝄞 and \\u0001"

[recovery]
dialect = "vllm"

[proxy]
idle_timeout = 60
connect_timeout = 2.5
"""


def _values(loaded: LoadedConfig) -> dict[str, Any]:
    infos = loaded.keys()  # KeyInfo of every key, not a mapping's keys
    return {k.key: k.value for k in infos}


def _show(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["config", *args]) == 0
    return capsys.readouterr().out


def _reload(tmp_path: Path, text: str) -> LoadedConfig:
    path = tmp_path / "shown.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env={})


def test_config_alone_shows_the_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    alone = _show(capsys)
    assert alone == _show(capsys, "show")
    assert tomllib.loads(alone)


def test_show_of_the_defaults_is_toml_that_loads_to_the_defaults(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPBREAK_CONFIG", raising=False)
    text = _show(capsys, "show")
    data = tomllib.loads(text)
    assert list(data) == list(_SECTIONS)
    assert sorted(f"{s}.{k}" for s, body in data.items() for k in body) == sorted(KEYS)
    defaults = {key: f.default for key, f in iter_keys()}
    for key, value in _values(_reload(tmp_path, text)).items():
        assert value == defaults[key] and type(value) is type(defaults[key]), key
    for line in text.splitlines():
        if " = " in line:
            assert line.endswith("# default"), line


def test_show_round_trips_a_file_and_variables(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "mine.toml"
    source.write_text(NON_DEFAULT, encoding="utf-8")
    monkeypatch.setenv("LOOPBREAK_LINES__MIN_MASS", "2048")
    monkeypatch.setenv("LOOPBREAK_JUDGING__BATCH_CHARS", "16")
    wanted = load_config(source)
    text = _show(capsys, "show", "--config", str(source))
    reloaded = _reload(tmp_path, text)
    assert _values(reloaded) == _values(wanted)
    assert reloaded.config == wanted.config and reloaded.proxy == wanted.proxy
    # Typed as the key is: a number key given an integer is written as a float.
    assert tomllib.loads(text)["proxy"]["idle_timeout"] == 60.0
    assert "idle_timeout = 60.0" in text
    lines = {line.split(" = ", 1)[0]: line for line in text.splitlines() if " = " in line}
    assert lines["novelty_streak_code"].endswith(f"# from {source} (default 20)")
    assert lines["min_mass"].endswith("# from $LOOPBREAK_LINES__MIN_MASS (default 1024)")
    assert lines["reaction"].endswith(f'# from {source} (default "steer")')
    assert lines["min_back"].endswith("# default")
    assert "LOOPBREAK_* variables" in text.splitlines()[0]


def test_show_changed_prints_only_what_was_set(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "mine.toml"
    source.write_text(NON_DEFAULT, encoding="utf-8")
    monkeypatch.setenv("LOOPBREAK_LINES__MIN_MASS", "2048")
    text = _show(capsys, "show", "--changed", "--config", str(source))
    data = tomllib.loads(text)
    assert {f"{s}.{k}" for s, body in data.items() for k in body} == {
        "block_repeat.novelty_streak_code", "block_repeat.enabled", "degeneracy.min_ink_share",
        "stall.reaction", "stall.cancel_cause", "recovery.dialect", "proxy.idle_timeout",
        "proxy.connect_timeout", "lines.min_mass"}
    assert _values(_reload(tmp_path, text)) == _values(load_config(source))


def test_show_output_is_whole_in_a_pipe() -> None:
    show = subprocess.Popen([sys.executable, "-m", "loopbreak", "config", "show"],
                            stdout=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"})
    grep = subprocess.run(["grep", "novelty_streak_code"], stdin=show.stdout,
                          capture_output=True, text=True, timeout=60)
    assert show.wait(timeout=60) == 0
    assert grep.stdout.splitlines() == ["novelty_streak_code = 20  # default"]


# --- init ------------------------------------------------------------------------------------

KEY_LINE = re.compile(r"^# ([a-z_]+) = ")


def _uncommented(text: str) -> str:
    return "\n".join(line[2:] if KEY_LINE.match(line) else line for line in text.splitlines())


def _sections_and_keys(text: str) -> list[str]:
    found, section = [], ""
    for line in text.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif (m := re.match(r"^(?:# )?([a-z_]+) = ", line)) is not None:
            found.append(f"{section}.{m.group(1)}")
    return found


@pytest.mark.parametrize("active", [False, True])
def test_init_template_has_every_key_and_loads_to_the_defaults(tmp_path: Path,
                                                                active: bool) -> None:
    text = init_template(active=active)
    assert _sections_and_keys(text) == KEYS
    loaded = _reload(tmp_path, text)
    defaults = load_config(env={})
    assert loaded.config == defaults.config and loaded.proxy == defaults.proxy
    assert _values(loaded) == _values(defaults)
    data = tomllib.loads(text)
    assert list(data) == list(_SECTIONS)
    if active:
        assert sorted(f"{s}.{k}" for s, body in data.items() for k in body) == sorted(KEYS)
        assert set(loaded.sources) == set(KEYS)
    else:
        assert all(body == {} for body in data.values())
        assert tomllib.loads(_uncommented(text)) == tomllib.loads(init_template(active=True))


def test_init_comments_each_key_with_its_reason_and_allowed_values() -> None:
    lines = init_template().splitlines()
    fields = dict(iter_keys())
    section = ""
    seen = 0
    for n, line in enumerate(lines):
        if line.startswith("["):
            section = line.strip("[]")
        m = KEY_LINE.match(line)
        if m is None:
            continue
        block: list[str] = []
        for above in reversed(lines[:n]):
            if not above.startswith("# "):
                break
            block.insert(0, above[2:])
        comment = " ".join(block)
        f = fields[f"{section}.{m.group(1)}"]
        assert " ".join(f.metadata["doc"].split()).replace("``", "`") in comment, m.group(1)
        assert "Allowed: " in comment
        if f.metadata["choices"]:
            assert "Allowed: one of " + ", ".join(f'"{c}"' for c in f.metadata["choices"]) \
                in comment
        seen += 1
    assert seen == len(KEYS)
    assert "# [proxy]" not in lines and "[proxy]" in lines


def test_init_writes_a_file_and_refuses_to_overwrite_it(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    path = tmp_path / "loopbreak.toml"
    assert main(["config", "init", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == init_template()
    assert str(path) in capsys.readouterr().err
    path.write_text("[cycle]\nmax_period = 600\n", encoding="utf-8")
    assert main(["config", "init", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"loopbreak: error: {path} exists: pass --force to overwrite it, or name "
                   "another file"]
    assert path.read_text(encoding="utf-8") == "[cycle]\nmax_period = 600\n"
    assert main(["config", "init", str(path), "--force", "--active"]) == 0
    assert path.read_text(encoding="utf-8") == init_template(active=True)


@pytest.mark.parametrize("args", [["config", "init"], ["config", "init", "-"]])
def test_init_without_a_path_prints_the_template(args: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 0
    assert capsys.readouterr().out == init_template()


@pytest.mark.parametrize("args, message", [
    (["config", "init", "{tmp}/no/such/dir/c.toml"], "{tmp}/no/such/dir/c.toml: "
                                                     "no folder {tmp}/no/such/dir"),
    (["config", "init", "{tmp}"], "{tmp}: a folder; name the file to write"),
    (["config", "init", "--json"], "--json is not an option of 'config init'"),
    (["config", "show", "--force"], "--force is not an option of 'config show'"),
    (["config", "show", "x.toml"], "config show takes no PATH ('x.toml'): name the file to "
                                   "read with --config FILE"),
])
def test_config_misuse_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   args: list[str], message: str) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "loopbreak: error: " + message.replace("{tmp}", str(tmp_path)))


# --- the TOML writer -------------------------------------------------------------------------

SCALARS = (st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
           | st.floats(allow_nan=False) | st.text())


@given(st.one_of(SCALARS, st.lists(SCALARS, max_size=5)))
def test_toml_value_reads_back_as_the_same_value(value: Any) -> None:
    read = tomllib.loads(f"v = {toml_value(value)}\n")["v"]
    assert read == value and type(read) is type(value if not isinstance(value, tuple) else [])
    if isinstance(value, list):
        assert [type(v) for v in read] == [type(v) for v in value]


@given(st.text(min_size=1))
def test_toml_key_reads_back_as_the_same_key(key: str) -> None:
    assert tomllib.loads(f"{toml_key(key)} = 1\n") == {key: 1}


def test_toml_value_refuses_what_it_cannot_write() -> None:
    with pytest.raises(TypeError, match="no TOML form for dict"):
        toml_value({"a": 1})

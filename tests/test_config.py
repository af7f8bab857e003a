"""Configuration: defaults, TOML file, environment, validation, sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopbreak import Config, ConfigError, load_config
from loopbreak._config import env_var, iter_keys
from loopbreak.cli import main


def test_every_key_is_optional_and_has_a_reason() -> None:
    loaded = load_config(env={})
    assert loaded.config == Config()
    for info in loaded.keys():  # noqa: SIM118 - LoadedConfig.keys() is not a dict
        assert info.source == "default" and info.value == info.default
        assert info.doc and info.allowed


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "loopbreak.toml"
    path.write_text("[cycle]\nmax_period = 600\nmin_span_text = 300\n\n"
                    "[stall]\nreaction = 'warn'\n")
    env = {"LOOPBREAK_CYCLE__MIN_SPAN_TEXT": "320", "LOOPBREAK_DEGENERACY__ON_TEXT": "yes"}
    loaded = load_config(path, env=env, overrides={"stall.max_fires": 7})
    c = loaded.config
    assert (c.cycle.max_period, c.cycle.min_span_text, c.degeneracy.on_text) == (600, 320, True)
    assert (c.stall.reaction, c.stall.max_fires) == ("warn", 7)
    assert loaded.sources["cycle.max_period"] == str(path)
    assert loaded.sources["cycle.min_span_text"] == "LOOPBREAK_CYCLE__MIN_SPAN_TEXT"
    assert loaded.sources["stall.max_fires"] == "override"


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[limits]\nmax_reasoning_chars = 5000\n")
    loaded = load_config(env={"LOOPBREAK_CONFIG": str(path)})
    assert loaded.config.limits.max_reasoning_chars == 5000 and loaded.path == path


@pytest.mark.parametrize(("setup", "message"), [
    ({"overrides": {"cycle.max_period": 1}},
     "cycle.max_period must be an integer in 2..4096 (0 = off), not 1 (from override)"),
    ({"overrides": {"lines.min_coverage": 2.5}},
     "lines.min_coverage must be a number in 0..1, not 2.5"),
    ({"overrides": {"stall.reaction": "explode"}},
     "stall.reaction must be one of 'warn', 'steer', 'cancel', not 'explode'"),
    ({"overrides": {"degeneracy.on_text": "yes"}},
     "degeneracy.on_text must be true or false, not 'yes'"),
    ({"overrides": {"cycle.max_period": True}}, "cycle.max_period must be an integer"),
    ({"overrides": {"lines.min_coverage": float("nan")}}, "lines.min_coverage must be a number"),
    ({"env": {"LOOPBREAK_CYCLE__MAX_PERIOD": "lots"}},
     "cycle.max_period must be an integer in 2..4096 (0 = off), not 'lots' "
     "(from LOOPBREAK_CYCLE__MAX_PERIOD)"),
    ({"env": {"LOOPBREAK_CYCLE__MAX_PERIODS": "3"}},
     "unknown key 'cycle.max_periods' in LOOPBREAK_CYCLE__MAX_PERIODS "
     "(did you mean 'cycle.max_period'?)"),
    ({"overrides": {"block_repeat.min_back": 40}},
     "block_repeat.min_back must be <= block_repeat.max_back (32), not 40"),
])
def test_bad_values_get_one_line_naming_key_and_range(setup: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as info:
        load_config(**{"env": {}, **setup})
    text = str(info.value)
    assert message in text and "\n" not in text


@pytest.mark.parametrize(("body", "message"), [
    ("[cycle\nmax_period = 3", "invalid TOML"),
    ("[cycles]\nmax_period = 300\n", "unknown key 'cycles'"),
    ("[cycle]\nmax_periodd = 300\n", "did you mean 'cycle.max_period'"),
    ("cycle = 3\n", "[cycle] in"),
    ("[cycle]\nmax_period = 'many'\n", "cycle.max_period must be an integer"),
])
def test_bad_files_get_one_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=None) as info:
        load_config(path, env={})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml", env={})
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe[cycle]")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary, env={})


def test_every_key_can_be_set_from_the_environment() -> None:
    for key, field in iter_keys():
        default = field.default
        raw = str(default).lower() if isinstance(default, bool) else str(default)
        loaded = load_config(env={env_var(key): raw})
        section, name = key.split(".", 1)
        holder = loaded.proxy if section == "proxy" else getattr(loaded.config, section)
        assert getattr(holder, name) == default
        assert loaded.sources[key] == env_var(key)


def test_replace_takes_dotted_keys_and_validates() -> None:
    config = Config().replace(**{"cycle.max_period": 0})
    assert config.cycle.max_period == 0 and Config().cycle.max_period == 4096
    with pytest.raises(ConfigError):
        Config().replace(**{"cycle.max_period": -5})


def test_config_show_prints_json_with_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    path = tmp_path / "c.toml"
    path.write_text("[cycle]\nmax_period = 700\n")
    monkeypatch.setenv("LOOPBREAK_STALL__MAX_FIRES", "9")
    assert main(["config", "show", "--config", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["keys"]["cycle.max_period"] == {"value": 700, "default": 4096,
                                                 "source": str(path),
                                                 "allowed": "an integer in 2..4096 (0 = off)"}
    assert shown["keys"]["stall.max_fires"]["source"] == "LOOPBREAK_STALL__MAX_FIRES"


def test_config_show_bad_file_is_one_line(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[cycle]\nmax_period = 1\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("loopbreak: error: cycle.max_period")


def test_the_proxy_settings_load_beside_the_engine_config(tmp_path: Path) -> None:
    """The engine's Config carries no proxy settings; the file's [proxy] section is loaded
    beside it, and the keys that moved to [recovery] are still read under their old names."""
    path = tmp_path / "loopbreak.toml"
    path.write_text('[proxy]\nidle_timeout = 60\ndialect = "vllm"\n\n[cycle]\nmax_period = 600\n')
    loaded = load_config(path, env={"LOOPBREAK_PROXY__RETRY_EFFORT": "minimal"})
    assert not hasattr(loaded.config, "proxy")
    assert loaded.proxy.idle_timeout == 60 and loaded.config.cycle.max_period == 600
    assert loaded.config.recovery.dialect == "vllm"
    assert loaded.config.recovery.retry_effort == "minimal"
    infos = loaded.keys()  # KeyInfo rows, not a mapping
    shown = {info.key: info for info in infos}
    assert shown["proxy.idle_timeout"].value == 60
    assert shown["recovery.dialect"].source == str(path)
    with pytest.raises(ConfigError, match="setting of the proxy, not of the engine"):
        Config().replace(**{"proxy.idle_timeout": 5.0})

"""offload config: the whole file validated, dotted get/set, atomic writes, env overrides, API key."""
from __future__ import annotations

import os

import pytest
import yaml

from offload import config as cfg_mod
from offload.config import ConfigError
from offload.subagents.config import DelegationConfig
from offload.home import config_path

pytestmark = pytest.mark.timeout(30)


def test_defaults_without_a_file():
    cfg = cfg_mod.load_config(env={})
    assert (cfg.model, cfg.base_url, cfg.api_key_env) == ("gpt-4o-mini", "https://api.openai.com/v1", "OPENAI_API_KEY")
    assert cfg.toolsets == ["terminal", "file", "web", "delegation"]
    assert cfg.delegation.stall_idle_seconds == 450 and cfg.delegation.stall_check_interval_seconds == 30
    assert not config_path().exists()  # reading never creates the file


@pytest.mark.parametrize("key,raw,expected", [
    ("model", "llama3.1:8b", "llama3.1:8b"),
    ("delegation.model", "1234", "1234"),  # a text field keeps what was typed
    ("delegation.model", "null", None),
    ("delegation.max_concurrent_children", "4", 4),
    ("delegation.independent_completions", "true", True),
    ("delegation.stall_idle_seconds", "1.5", 1.5),
    ("toolsets", "[terminal, file]", ["terminal", "file"]),
])
def test_set_then_get(key, raw, expected):
    assert cfg_mod.set_value(key, raw) == (expected, [])
    assert cfg_mod.get_value(key) == expected
    assert os.stat(config_path()).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("key,raw,needles", [
    ("delegation.max_concurrent_children", "0", ["delegation.max_concurrent_children", "greater than or equal to 1",
                                                 "set delegation.max_concurrent_children 10"]),
    ("delegation.colour", "red", ["unknown config key 'delegation.colour'", "delegation.stall_idle_seconds"]),
    ("colour", "red", ["unknown config key 'colour'", "base_url"]),
    ("model.name", "x", ["model is a single value"]),
    ("toolsets", "[shell]", ["unknown toolset 'shell'"]),
    ("base_url", "localhost:11434", ["base_url", "http(s) URL"]),
    ("delegation.stall_grace_seconds", "-1", ["delegation.stall_grace_seconds"]),
])
def test_a_bad_set_names_the_key_and_leaves_the_file_unchanged(key, raw, needles):
    config_path().write_text("# my settings\nmodel: keep-me\n", encoding="utf-8")
    before = config_path().read_bytes()
    with pytest.raises(ConfigError) as err:
        cfg_mod.set_value(key, raw)
    for needle in needles:
        assert needle in str(err.value)
    assert config_path().read_bytes() == before
    assert not [p for p in config_path().parent.iterdir() if p.name.endswith(".tmp")]


def test_a_broken_file_is_reported_with_the_fix():
    config_path().write_text("delegation:\n  max_concurrent_children: lots\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"delegation\.max_concurrent_children.*offload config set"):
        cfg_mod.load_config(env={})


def test_env_overrides_model_and_base_url_and_are_validated():
    cfg = cfg_mod.load_config(env={"OFFLOAD_MODEL": "m2", "OFFLOAD_BASE_URL": "http://127.0.0.1:9/v1/"})
    assert (cfg.model, cfg.base_url) == ("m2", "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="OFFLOAD_BASE_URL"):
        cfg_mod.load_config(env={"OFFLOAD_BASE_URL": "nonsense"})


def test_api_key_comes_from_the_env_and_is_required_only_by_hosted_endpoints():
    cfg = cfg_mod.load_config(env={})
    assert cfg_mod.resolve_api_key(cfg, {"OPENAI_API_KEY": "sk-1"}) == "sk-1"
    assert cfg_mod.resolve_api_key(cfg, {"OPENAI_API_KEY": "sk-1", "OFFLOAD_API_KEY": "sk-2"}) == "sk-2"
    with pytest.raises(ConfigError, match="export OPENAI_API_KEY"):
        cfg_mod.resolve_api_key(cfg, {})
    local = cfg.model_copy(update={"base_url": "http://localhost:11434/v1"})
    assert cfg_mod.resolve_api_key(local, {}) is None


def test_the_engine_takes_the_stall_tuning():
    from offload.config import OffloadConfig
    from offload.runtime import Offload

    cfg = OffloadConfig(delegation=DelegationConfig(stall_idle_seconds=1, stall_in_tool_seconds=2,
                                                    stall_grace_seconds=3, stall_check_interval_seconds=0.2))
    with Offload(cfg) as off:
        policy = off.engine.policy()
    assert (policy.stall_idle_s, policy.stall_in_tool_s, policy.stall_grace_s,
            policy.stall_check_interval_s) == (1.0, 2.0, 3.0, 0.2)


def test_the_written_file_is_plain_yaml_the_delegation_tool_reads():
    cfg_mod.set_value("delegation.model", "cheap-model")
    assert yaml.safe_load(config_path().read_text()) == {"delegation": {"model": "cheap-model"}}
    import tools.delegate_tool as dt
    assert dt._load_config()["model"] == "cheap-model"

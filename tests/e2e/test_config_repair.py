"""``offload config`` repairs a broken file one key at a time, keeps its comments, and every bad
setting is refused when set or loaded — one line on stderr naming the key and its fix, exit 2."""
from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import offload, one_line
from offload.home import config_path

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]




BROKEN = """\
# my settings, written by hand
model: m1   # the parent's model
colour: red
delegation:
  max_concurrent_children: 0
"""


def test_a_file_with_two_bad_keys_is_repaired_one_key_at_a_time_keeping_comments():
    config_path().write_text(BROKEN, encoding="utf-8")
    shown = offload("config", "show")
    assert shown.returncode == 2
    line = one_line(shown.stderr)
    assert "colour: unknown key (fix: offload config unset colour)" in line
    assert "delegation.max_concurrent_children: " in line and "offload config set delegation.max_concurrent_children 10" in line

    fixed = offload("config", "set", "delegation.max_concurrent_children", "4")
    assert fixed.returncode == 0, fixed  # the other bad key does not block this repair ...
    assert "still has a problem: colour: unknown key (fix: offload config unset colour)" in fixed.stderr  # ... it is named
    unset = offload("config", "unset", "colour")
    assert unset.returncode == 0, unset
    assert offload("config", "show").returncode == 0
    assert config_path().read_text(encoding="utf-8") == (
        "# my settings, written by hand\nmodel: m1   # the parent's model\ndelegation:\n  max_concurrent_children: 4\n")


@pytest.mark.parametrize("args,needle", [
    (("model", "[1,2"), "'[1,2' is not a valid YAML/JSON value"),
    (("model", "[1,2]"), "model is text, but '[1,2]' is a list; quote it"),
    (("delegation.stall_grace_seconds", "-1"), "stall_grace_seconds: Input should be greater than or equal to 0"),
    (("workspace", "/nonexistent/dir"), "workspace: is not an existing directory"),
    (("delegation.max_async_children", "2"), "delegation.max_async_children is deprecated and ignored"),
    (("colour", "red"), "unknown config key 'colour'"),
])
def test_a_bad_value_is_refused_when_set(args, needle):
    config_path().write_text("model: keep   # comment\n", encoding="utf-8")
    done = offload("config", "set", *args)
    assert done.returncode == 2, done
    assert needle in one_line(done.stderr)
    assert "No such option" not in done.stderr  # a negative number needs no `--`
    assert config_path().read_text(encoding="utf-8") == "model: keep   # comment\n"


def test_a_negative_number_is_a_value_not_an_option():
    done = offload("config", "set", "delegation.stall_grace_seconds", "-0")
    assert done.returncode == 0, done
    assert offload("config", "get", "delegation.stall_grace_seconds").stdout.strip() == "0.0"


@pytest.mark.parametrize("text,env,needle", [
    ("workspace: /nonexistent/dir\n", {}, "workspace: is not an existing directory"),
    ("delegation:\n  max_async_children: 3\n", {}, "fix: offload config unset delegation.max_async_children"),
    ("", {"DELEGATION_MAX_CONCURRENT_CHILDREN": "lots"}, "$DELEGATION_MAX_CONCURRENT_CHILDREN must be a whole number"),
    ("delegation: [unclosed\n", {}, "config.yaml is not valid YAML at line 2, column 1"),
])
def test_a_bad_setting_is_refused_at_load_time_not_at_run_time(text, env, needle):
    config_path().write_text(text, encoding="utf-8")
    done = offload("run", "hello", **env)
    assert done.returncode == 2, done
    assert needle in one_line(done.stderr)


def test_config_show_json_lists_every_key():
    config_path().write_text("model: m1\n", encoding="utf-8")
    done = offload("config", "show", "--json")
    assert done.returncode == 0, done
    data = json.loads(done.stdout)
    assert data["model"] == "m1" and data["delegation"]["max_concurrent_children"] == 10
    assert {"base_url", "api_key_env", "workspace", "max_iterations", "toolsets"} <= set(data)

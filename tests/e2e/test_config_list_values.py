"""A bad ELEMENT of a list setting is refused like any bad value (issue 26, item 1): ``config set``
exits 2 and leaves the file unchanged, and the fix every message prints is a command that works
when pasted into a shell."""
from __future__ import annotations

import shlex

import pytest

from tests.e2e.conftest import offload, one_line
from offload.home import config_path

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

KEPT = "model: keep   # comment\n"


@pytest.mark.parametrize("key,value", [
    ("toolsets", "[1]"),
    ("toolsets", "[terminal, 7]"),
    ("gateway.telegram.allowed_chat_ids", "[abc]"),
])
def test_a_list_with_a_bad_element_is_refused_and_the_file_unchanged(key, value):
    config_path().write_text(KEPT, encoding="utf-8")
    done = offload("config", "set", key, value)
    assert done.returncode == 2, done
    line = one_line(done.stderr)
    assert f"{key}." in line and "was not changed" in line
    assert config_path().read_text(encoding="utf-8") == KEPT
    fix = line.split("the default is `", 1)[1].rstrip("`")
    repaired = offload(*shlex.split(fix)[1:])
    assert repaired.returncode == 0, (fix, repaired)
    assert offload("config", "show").returncode == 0


def test_the_fix_printed_for_a_hand_written_bad_list_repairs_it():
    config_path().write_text("toolsets: [1]\n", encoding="utf-8")
    refused = offload("run", "hello")
    assert refused.returncode == 2
    line = one_line(refused.stderr)
    assert "toolsets.0" in line
    fix = line.split("(fix: ", 1)[1].rsplit(")", 1)[0]
    assert fix.startswith("offload config set toolsets "), fix
    repaired = offload(*shlex.split(fix)[1:])
    assert repaired.returncode == 0 and not repaired.stderr, repaired
    assert offload("config", "get", "toolsets").stdout.strip() == "[terminal, file, web, delegation]"

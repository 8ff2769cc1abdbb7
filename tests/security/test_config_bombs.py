"""A hostile config.yaml cannot explode offload (issue 40, point 8): a YAML alias bomb under
1 KB -- nine lines of nested aliases, 9^9 strings once expanded -- made every command that
reads the file walk gigabytes (``offload config show`` ran out of memory). Each command now
fails at once, in bounded memory, with one line naming the file, the alias and the fix."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import cli_env, one_line

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
MEMORY_CAP_BYTES = 1 << 30  # a refusal fits in far less; the expanded bomb needs gigabytes


def alias_bomb() -> str:
    """``delegation.fallback_providers`` (a known key that takes any list) holding the bomb."""
    rows = ['&a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    rows += [f"&{name} [{', '.join([f'*{prev}'] * 9)}]" for prev, name in zip("abcdefgh", "bcdefghi")]
    return "model: demo-model\ndelegation:\n  fallback_providers:\n" + "".join(f"  - {row}\n" for row in rows)


def capped_offload(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m offload ARGS`` with its address space capped: a bomb that expands dies
    (or times out) instead of taking the machine with it; the seconds it took."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "offload", *args], capture_output=True, text=True, timeout=60,
                          env=cli_env(HERMES_HOME=str(home)), stdin=subprocess.DEVNULL, preexec_fn=cap)
    return done, time.monotonic() - started


@pytest.mark.parametrize("args", [("config", "show"), ("config", "get", "model"), ("config", "set", "model", "m2"),
                                  ("agents",), ("run", "hello")])
def test_an_alias_bomb_in_config_yaml_fails_every_command_fast_with_the_fix(
        _isolated_hermes_home: Path, args: tuple[str, ...]) -> None:
    config = _isolated_hermes_home / "config.yaml"
    config.write_text(alias_bomb(), encoding="utf-8")
    assert len(config.read_bytes()) < 1024
    done, took_s = capped_offload(_isolated_hermes_home, *args)
    assert done.returncode == 2, done
    line = one_line(done.stderr)
    assert f"{config} uses a YAML alias (*a at line 5" in line, line
    assert "Write the value out in full" in line and f"mv {config} {config}.bad" in line, line
    assert took_s < 15, took_s  # refused where the parser meets the alias, never expanded
    assert config.read_text(encoding="utf-8") == alias_bomb()  # nothing written over it


def test_an_alias_in_a_value_given_to_config_set_is_refused(_isolated_hermes_home: Path) -> None:
    done, _ = capped_offload(_isolated_hermes_home, "config", "set", "delegation.fallback_providers", "[&x [a], *x]")
    assert done.returncode == 2, done
    assert "the value of delegation.fallback_providers uses a YAML alias (*x" in one_line(done.stderr)
    assert not (_isolated_hermes_home / "config.yaml").exists()


def test_anchors_without_aliases_still_load(_isolated_hermes_home: Path) -> None:
    (_isolated_hermes_home / "config.yaml").write_text("model: &m demo-model\n", encoding="utf-8")
    done, _ = capped_offload(_isolated_hermes_home, "config", "get", "model")
    assert done.returncode == 0 and done.stdout.strip() == "demo-model", done

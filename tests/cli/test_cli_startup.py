"""``offload --help`` stays fast, ``--version`` tells the installed version, and shell completion
installs and completes.

The speed of --help is checked by what it imports, not by a stopwatch (a shared machine makes
timings flaky): it must not load rich, PyYAML, the openai SDK, httpx, sqlite3, the agent or the
engine — together they cost most of a second (``python -X importtime -m offload --help``
shows the rest). ``offload --help`` and ``--version`` do not load pydantic either; a
subcommand's ``--help`` does, through typer itself (it builds a pydantic adapter to coerce the
root group's options), ~0.1 s that is not ours to save.
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import cli_env

pytestmark = pytest.mark.timeout(60)

HEAVY = ("rich", "yaml", "openai", "httpx", "sqlite3", "agent", "tools", "offload.config",
         "offload.cli.views", "offload.session.driver")

# Runs the CLI's entry point in-process, then reports which modules it loaded.
_RUN_AND_LIST_MODULES = """
import sys
sys.argv = ["offload", *sys.argv[1:]]
from offload.cli.app import main
try:
    main()
except SystemExit:
    pass
print("MODULES", " ".join(sorted(sys.modules)))
"""


def _loaded_modules(*args: str) -> tuple[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", _RUN_AND_LIST_MODULES, *args], capture_output=True, text=True,
                          env=cli_env(), timeout=50, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done
    help_text, _, modules = done.stdout.rpartition("MODULES ")
    return help_text, set(modules.split())


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("config", "--help"), ("chat", "--help"),
                                  ("inbox", "--help")])
def test_help_and_version_import_no_heavy_module(args):
    text, modules = _loaded_modules(*args)
    assert text.strip(), "printed nothing"
    assert "offload.cli.app" in modules  # the probe really ran the CLI
    assert _heavy(modules) == []
    if len(args) == 1:
        assert "pydantic" not in modules


def test_the_probe_sees_heavy_imports_when_a_command_runs():
    """The check above can fail: a real command loads the modules --help must not."""
    _, modules = _loaded_modules("config", "show")
    assert {"yaml", "offload.config"} <= set(_heavy(modules))


def _offload(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "offload", *args], capture_output=True, text=True,
                          env=cli_env(**env), timeout=50, stdin=subprocess.DEVNULL)


def test_version_is_the_installed_distributions():
    done = _offload("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"offload {importlib.metadata.version('offload')}")


def _complete(completion_script: Path, home: Path, *words: str) -> list[str]:
    """What bash offers after ``words``, through the installed completion function."""
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    launcher = bin_dir / "offload"  # the completion function runs `offload` from PATH
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} -m offload \"$@\"\n")
    launcher.chmod(0o755)
    script = (f"source {completion_script}\nCOMP_WORDS=({' '.join(words)})\nCOMP_CWORD={len(words) - 1}\n"
              "_offload_completion offload\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    env = cli_env(HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, env=env, timeout=50)
    assert done.returncode == 0, done
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_install_completion_writes_a_bash_completion_that_completes_commands(tmp_path):
    """The shell named on the command line is the one installed: no guessing from the parent
    processes, which fails where none is a shell and $SHELL is unset (CI, issue 41)."""
    done = _offload("--install-completion", "bash", HOME=str(tmp_path))
    assert done.returncode == 0, done
    script = tmp_path / ".bash_completions" / "offload.sh"
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    assert _complete(script, tmp_path, "offload", "con") == ["config"]
    assert _complete(script, tmp_path, "offload", "config", "s") == ["set", "show"]


def test_install_completion_installs_the_shell_it_is_told_not_the_one_it_runs_in(tmp_path):
    done = _offload("--install-completion", "zsh", HOME=str(tmp_path))  # run from bash (or no shell at all)
    assert done.returncode == 0 and done.stdout.startswith("zsh completion installed"), done
    assert not (tmp_path / ".bash_completions").exists()


@pytest.mark.parametrize("args", [("config", "get", "model"), ("config", "show")])
def test_reading_the_config_loads_no_http_client(args):
    """A config command reads config.yaml only: the LLM client (httpx, ~80 ms) is not its cost."""
    _, modules = _loaded_modules(*args)
    assert "offload.config" in modules  # the command really read the config
    assert not {m for m in modules if m == "httpx" or m.startswith(("httpx.", "offload.agent.llm"))
                if m != "offload.agent.llm_stream"}

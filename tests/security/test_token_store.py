"""The token store of a home (``offload.access.tokens``): made on first need, mode 0600, refused
when others may read it, short tokens refused wherever they come from, named tokens, atomic
rewrites, and one operator token when several processes start at once; ``offload token``."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from offload.errors import CliError
from offload.access.tokens import FILE_NAME, MIN_LENGTH, OPERATOR, TokenStore, resolve
from tests.e2e.conftest import offload

pytestmark = pytest.mark.timeout(60)


def test_the_operator_token_is_made_once_in_a_0600_file(tmp_path):
    home = tmp_path / "home"
    store = TokenStore(home)
    assert store.tokens() == {} and not (home / FILE_NAME).exists()
    token = store.get()
    assert len(token) >= MIN_LENGTH and TokenStore(home).get() == token
    assert stat.S_IMODE((home / FILE_NAME).stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert token not in repr(store) and [n for n, _ in store.listing()] == [OPERATOR]
    assert not [p for p in home.iterdir() if p.name.startswith(".tokens")]  # no temporary file left


def test_a_file_others_may_read_is_refused_with_the_chmod(tmp_path):
    store = TokenStore(tmp_path)
    token = store.get()
    os.chmod(store.path, 0o644)
    with pytest.raises(CliError, match=r"mode 0644\); run: chmod 600 .*tokens.json") as refused:
        TokenStore(tmp_path).get()
    assert token not in str(refused.value)


def test_short_or_damaged_tokens_in_the_file_are_refused_with_the_fix(tmp_path):
    store = TokenStore(tmp_path)
    store.get()
    data = json.loads(store.path.read_text())
    data["tokens"][OPERATOR]["token"] = "short-secret"
    store.path.write_text(json.dumps(data))
    with pytest.raises(CliError, match=r"too short \(12 characters; at least 32.*offload token rotate operator") as e:
        TokenStore(tmp_path).get()
    assert "short-secret" not in str(e.value)
    assert len(TokenStore(tmp_path).rotate()) >= MIN_LENGTH  # the fix it names works
    store.path.write_text("{not json")
    with pytest.raises(CliError, match="is damaged .*move it aside"):
        TokenStore(tmp_path).tokens()


def test_short_tokens_from_the_environment_or_the_command_line_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OFFLOAD_DASHBOARD_TOKEN", "x" * (MIN_LENGTH - 1))
    with pytest.raises(CliError, match=r"\$OFFLOAD_DASHBOARD_TOKEN is too short"):
        resolve(tmp_path, env_var="OFFLOAD_DASHBOARD_TOKEN")
    monkeypatch.setenv("OFFLOAD_DASHBOARD_TOKEN", "")
    with pytest.raises(CliError, match="too short"):
        resolve(tmp_path, env_var="OFFLOAD_DASHBOARD_TOKEN")
    monkeypatch.setenv("OFFLOAD_DASHBOARD_TOKEN", "y" * MIN_LENGTH)
    assert resolve(tmp_path, env_var="OFFLOAD_DASHBOARD_TOKEN") == ("y" * MIN_LENGTH, "$OFFLOAD_DASHBOARD_TOKEN")
    with pytest.raises(CliError, match="the --token value is too short"):
        resolve(tmp_path, env_var="OFFLOAD_DASHBOARD_TOKEN", flag="abc")
    assert "--token is deprecated" in capsys.readouterr().err
    monkeypatch.delenv("OFFLOAD_DASHBOARD_TOKEN")
    assert resolve(tmp_path, env_var="OFFLOAD_DASHBOARD_TOKEN") == (None, str(tmp_path / FILE_NAME))


def test_named_tokens_match_and_are_revoked_alone(tmp_path):
    store = TokenStore(tmp_path)
    operator, claude = store.get(), store.add("claude-code")
    assert store.match(claude) == "claude-code" and store.match(operator) == OPERATOR
    assert store.match("z" * 43) is None
    with pytest.raises(CliError, match="exists already"):
        store.add("claude-code")
    with pytest.raises(CliError, match="not allowed"):
        store.add("../evil")
    store.remove("claude-code")
    assert store.match(claude) is None and store.match(operator) == OPERATOR
    with pytest.raises(CliError, match="offload token add codex"):
        store.get("codex")


def test_processes_starting_at_once_agree_on_one_operator_token(tmp_path):
    script = "import sys; from offload.access.tokens import TokenStore; print(TokenStore(sys.argv[1]).get())"
    def start(_):
        return subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    with ThreadPoolExecutor(6) as pool:
        tokens = set(pool.map(start, range(6)))
    assert tokens == {TokenStore(tmp_path).get()}


def test_the_token_command(_isolated_hermes_home):
    shown = offload("token", "show")
    assert shown.returncode == 0 and shown.stdout.strip() == TokenStore(_isolated_hermes_home).get()
    added = offload("token", "add", "claude-code")
    assert added.returncode == 0 and TokenStore(_isolated_hermes_home).match(added.stdout.strip()) == "claude-code"
    listed = offload("token", "list").stdout
    assert "claude-code" in listed and "operator" in listed and shown.stdout.strip() not in listed
    rotated = offload("token", "rotate")
    assert rotated.stdout.strip() != shown.stdout.strip() and TokenStore(_isolated_hermes_home).match(
        shown.stdout.strip()) is None
    assert offload("token", "remove", "claude-code").returncode == 0
    missing = offload("token", "remove", "claude-code")
    assert missing.returncode == 2 and "no token named 'claude-code'" in missing.stderr

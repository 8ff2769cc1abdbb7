"""Every test gets its own HERMES_HOME, so no test reads or writes ~/.hermes."""
import pytest


@pytest.fixture(autouse=True)
def _isolated_hermes_home(tmp_path, monkeypatch):
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OFFLOAD_API_KEY", "OFFLOAD_BASE_URL", "OFFLOAD_MODEL"):
        monkeypatch.delenv(key, raising=False)
    yield home

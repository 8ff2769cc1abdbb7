"""The real-server harness itself, with no llama-server: a stand-in binary records how the
harness starts it, so the AMX guard (``--no-repack`` and ``LLAMA_ARG_REPACK=0``, which keep
ggml's AMX and repacking buffer types unused) is checked on every machine, AMX or not.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.realserver.llama import LlamaServer


@pytest.fixture()
def recording_server(tmp_path, monkeypatch) -> Path:
    record = tmp_path / "started.json"
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\n"
                      "import json, os, sys\n"
                      f"open({str(record)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], "
                      "'repack': os.environ.get('LLAMA_ARG_REPACK')}))\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("OFFLOAD_TEST_LLAMA_SERVER", str(binary))
    monkeypatch.setenv("OFFLOAD_TEST_LLAMA_MODEL", str(model))
    monkeypatch.delenv("LLAMA_ARG_REPACK", raising=False)
    return record


@pytest.mark.timeout(30)
def test_the_harness_starts_every_server_with_the_repack_and_amx_path_off(recording_server, tmp_path):
    server = LlamaServer("-m", os.environ["OFFLOAD_TEST_LLAMA_MODEL"], "-n", "16", log_path=tmp_path / "log")
    assert server.proc.wait(timeout=20) == 0
    server.stop()
    started = json.loads(recording_server.read_text())
    assert "--no-repack" in started["argv"]
    assert started["argv"][-2:] == ["-n", "16"]  # the caller's own arguments still come last
    assert started["repack"] == "0"  # inherited by the model servers a router starts

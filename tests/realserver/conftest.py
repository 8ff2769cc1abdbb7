"""Session-scoped llama-server processes for the real-server tests (see ``llama.py``).

* ``llama``: the model as a plain server (one model, any model name accepted).
* ``llama_n16``: the same with ``-n 16``: every reply is cut off after 16 tokens.
* ``llama_router``: router mode (``--models-dir``): the model is served as ``smollm2``, and an
  unknown model name gets llama.cpp's own ``400 model 'x' not found``.
* ``llama_slow_prompt``: ``-b 32 -ub 32``: a long prompt is read in many small batches, so it
  takes seconds before the first token (a slow CPU server in miniature).
"""
from __future__ import annotations

from typing import Iterator

import pytest

from tests.e2e.conftest import cli, workspace, write_config  # noqa: F401 - fixtures used here
from tests.realserver.llama import LlamaServer, llama_paths

pytestmark = pytest.mark.realserver


def _serve(tmp_path_factory, name: str, *args: str, model: bool = True) -> Iterator[LlamaServer]:
    _, model_path = llama_paths()
    log = tmp_path_factory.mktemp(name) / "llama-server.log"
    server = LlamaServer(*(("-m", model_path) if model else ()), *args, log_path=log)
    try:
        yield server.wait_ready()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama(tmp_path_factory) -> Iterator[LlamaServer]:
    # -n 256: a model that rambles is cut off (and the test that expects a finished answer says so)
    # instead of writing until its context is full.
    yield from _serve(tmp_path_factory, "llama", "-c", "8192", "-np", "2", "-n", "256")


@pytest.fixture(scope="session")
def llama_n16(tmp_path_factory) -> Iterator[LlamaServer]:
    yield from _serve(tmp_path_factory, "llama-n16", "-n", "16", "-c", "4096", "-np", "2")


@pytest.fixture(scope="session")
def llama_router(tmp_path_factory) -> Iterator[LlamaServer]:
    _, model_path = llama_paths()
    models = tmp_path_factory.mktemp("router-models")
    (models / "smollm2.gguf").symlink_to(model_path)
    yield from _serve(tmp_path_factory, "llama-router", "--models-dir", str(models), "-c", "4096", model=False)


@pytest.fixture(scope="session")
def llama_slow_prompt(tmp_path_factory) -> Iterator[LlamaServer]:
    yield from _serve(tmp_path_factory, "llama-slow", "-c", "8192", "-np", "1", "-b", "32", "-ub", "32",
                      "-n", "4")

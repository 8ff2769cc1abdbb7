"""``offload worker`` pays the one-time costs of its children before its first claim (issue 31):
the HTTP stack's modules (httpx imports its transport, httpcore, only when the first client is
built), the shared TLS context and the built-in toolsets' modules. Inside the drain they cost a
fresh worker 0.1-0.4 s of CPU under the GIL while its first units ran.

Checked in a fresh interpreter by what is loaded, not by a stopwatch."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

_PRELOAD_AND_LIST = """
import sys
from offload.agent.preload import preload
from offload.agent import llm
from offload.toolsets.toolset_names import BUILTIN_TOOLSET_MODULES
before = {"httpcore" in sys.modules, llm._shared_ssl_context.cache_info().currsize > 0,
          *(m in sys.modules for m in BUILTIN_TOOLSET_MODULES.values())}
preload()
after = {"httpcore" in sys.modules, llm._shared_ssl_context.cache_info().currsize > 0,
         *(m in sys.modules for m in BUILTIN_TOOLSET_MODULES.values())}
print(sorted(before), sorted(after))
"""


def test_preload_imports_the_http_transport_and_toolsets_and_builds_the_tls_context():
    out = subprocess.run([sys.executable, "-c", _PRELOAD_AND_LIST], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[False]", "[True]"], out.stdout + out.stderr

"""What a process's first background child would pay once, paid before a worker's first claim
instead of while its units run: the HTTP stack's modules and TLS context, the built-in
toolsets' modules (~0.1-0.4 s of CPU under the GIL). Both workers call it (``offload.owner``)."""
from __future__ import annotations

import logging


def preload() -> None:
    """Pay what the first child of this process would pay once (the HTTP stack's modules and
    TLS context, the built-in toolsets' modules) before the first claim, not while units run:
    ~0.1-0.4 s of CPU under the GIL that held back the first units' starts."""
    from offload.agent.llm import preload as preload_http
    from offload.agent.toolsets import resolve_tools
    from offload.toolsets.toolset_names import BUILTIN_TOOLSET_MODULES

    try:
        preload_http()
        resolve_tools(BUILTIN_TOOLSET_MODULES)
    except Exception:  # the first child that needs it reports the failure where it matters
        logging.getLogger(__name__).debug("preloading the HTTP client and toolsets failed", exc_info=True)

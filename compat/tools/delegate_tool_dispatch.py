"""hermes path ``tools.delegate_tool_dispatch``: offload.subagents.dispatch under its fixed name."""
import sys

import offload.subagents.dispatch as _impl

sys.modules[__name__] = _impl

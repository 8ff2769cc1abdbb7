"""hermes path ``tools.delegate_tool``: offload.subagents.tool under its fixed name."""
import sys

import offload.subagents.tool as _impl

sys.modules[__name__] = _impl

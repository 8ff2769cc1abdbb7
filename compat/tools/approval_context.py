"""hermes path ``tools.approval_context``: offload.context.approval under its fixed name."""
import sys

import offload.context.approval as _impl

sys.modules[__name__] = _impl

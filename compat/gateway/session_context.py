"""hermes path ``gateway.session_context``: offload.gateway.session_context under its fixed name."""
import sys

import offload.gateway.session_context as _impl

sys.modules[__name__] = _impl

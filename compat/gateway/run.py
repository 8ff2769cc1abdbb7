"""hermes path ``gateway.run``: offload.gateway.runner under its fixed name."""
import sys

import offload.gateway.runner as _impl

sys.modules[__name__] = _impl

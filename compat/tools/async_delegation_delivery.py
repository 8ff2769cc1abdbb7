"""hermes path ``tools.async_delegation_delivery``: offload.default_runtime.delivery under its fixed name."""
import sys

import offload.default_runtime.delivery as _impl

sys.modules[__name__] = _impl

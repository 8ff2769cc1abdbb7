"""hermes path ``tools.async_delegation``: offload.default_runtime.engine under its fixed name."""
import sys

import offload.default_runtime.engine as _impl

sys.modules[__name__] = _impl

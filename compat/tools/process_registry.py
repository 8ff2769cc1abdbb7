"""hermes path ``tools.process_registry``: offload.engine.bus under its fixed name."""
import sys

import offload.engine.bus as _impl

sys.modules[__name__] = _impl

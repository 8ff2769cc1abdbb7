"""hermes path ``tools.process_registry_notifications``: offload.render.bus_notifications under its fixed name."""
import sys

import offload.render.bus_notifications as _impl

sys.modules[__name__] = _impl

"""The engine's logger, ``offload.engine``: the engine, the ledger backends and their loops log
here, so an operator's logging config (and a test's caplog) filters one name."""
import logging

logger = logging.getLogger("offload.engine")

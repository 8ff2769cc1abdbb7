"""The engine's logger. Its name is kept from the hermes module layout
(``tools.async_delegation``), because operators' logging configs and tests filter on it."""
import logging

logger = logging.getLogger("tools.async_delegation")

"""hermes path ``tools.approval_context``: the turn's session key, ``offload.context.approval``."""
from offload.context.approval import (  # noqa: F401 - re-exported
    get_current_session_key, reset_current_session_key, set_current_session_key,
)

"""The seam between the gateway and one chat platform (Telegram, Matrix; Slack or Discord later).

A platform turns its wire protocol into ``Incoming`` messages and sends plain text back; the
gateway never sees HTTP. Invariant: a ``send``/``edit`` either returns normally (the platform
accepted every part), raises ``ChatGone`` (the chat can never receive it: blocked, deleted,
kicked — drop the result with the reason) or raises ``SendFailed`` (transient: keep the result
pending and retry later). Escaping is the platform's job: ``header`` is ours and rendered as a
header, ``body`` is untrusted text (child output) and must never render as formatting.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence


class ChatGone(Exception):
    """The platform says this chat will never accept a message from us (403, chat not found)."""


class SendFailed(Exception):
    """A transient failure (rate limit, 5xx, network) that outlasted the client's retries."""


@dataclass(frozen=True)
class Route:
    """Where a reply goes: the chat, and the thread inside it when there is one."""

    chat_id: str
    thread_id: str = ""


@dataclass(frozen=True)
class Incoming:
    """One user message, already stripped of platform detail."""

    route: Route
    chat_type: str  # "dm", "thread" or "group": the session-key chat type
    text: str
    user_id: str = ""
    user_name: str = ""
    button: str = ""  # a press of an inline button we sent: its data ("" for a message)
    press_id: str = ""  # the platform's id of that press, to answer it (``answer_button``)
    message_id: str = ""  # the message whose button was pressed


class Platform(Protocol):
    name: str
    # False for a channel that cannot receive a message later (a stateless webhook): the
    # gateway then makes delegate_task run inline, with a note saying why.
    delivers_later: bool

    def poll(self, timeout_s: float, handle: Callable[[Incoming], None]) -> int:
        """Block up to ``timeout_s`` for new messages and pass each to ``handle``; a message is
        confirmed to the platform only after ``handle`` returned. Returns how many updates came."""
        ...

    def send(self, route: Route, body: str, header: str = "", first_part: int = 0,
             on_part: Callable[[int], None] | None = None, buttons: Sequence[tuple[str, str]] = ()) -> list[str]:
        """Send ``header`` + ``body`` (split as needed) from part ``first_part`` on (the parts
        before it were shown by an earlier attempt), calling ``on_part(n)`` once the first ``n``
        parts are shown; returns the platform's ids of the messages sent now. ``buttons``:
        (label, data) pairs under the last part; a press comes back as an ``Incoming`` whose
        ``button`` is the data."""
        ...

    def edit(self, route: Route, message_id: str, body: str, header: str = "") -> None:
        """Replace the text of a message we sent (the live /agents roster; an answered
        approval request, whose buttons go with the old text)."""
        ...

    def answer_button(self, press_id: str, text: str) -> None:
        """Acknowledge a button press with a short notice to the person who pressed it."""
        ...


# The delegation id whose result a ``send`` on this thread carries ("" for any other message): a
# platform whose server deduplicates by a client transaction id (Matrix) derives it from this and
# the part number, so a send retried after a crash or a lost response is shown once. Telegram has
# no such id and ignores it. A context variable, not a parameter: the seam's ``send`` stays as
# every platform (and test double) already implements it.
SENDING_RESULT: ContextVar[str] = ContextVar("sending_result", default="")


@contextmanager
def sending_result(delegation_id: str) -> Iterator[None]:
    token = SENDING_RESULT.set(delegation_id)
    try:
        yield
    finally:
        SENDING_RESULT.reset(token)


def session_key(platform: str, message: Incoming) -> str:
    """The agent session key of a chat/thread: ``agent:main:<platform>:<type>:<chat>[:<thread>]``."""
    key = f"agent:main:{platform}:{message.chat_type}:{message.route.chat_id}"
    return f"{key}:{message.route.thread_id}" if message.route.thread_id else key

"""``MatrixPlatform``: the ``Platform`` seam over the Matrix client-server API (``MatrixClient``).

Owns the sync position: the ``since`` token is persisted in the gateway state only after every
event of a batch was handled, and every handled event id is recorded at once (the last
``_SEEN_KEPT``), so a crash in the middle of a batch neither skips an event nor hands one over
twice. The first start has no token: it syncs once without handing over old messages (only
pending invitations are answered), so a new bot never replays a room's history.

Also owns: invitations (accepted from an allowed user, and that room is served from then on;
declined from anyone else), rooms and threads as routes (ids escaped for session keys, see
``ids``), results as HTML + plain messages split under the event size limit, each part of a
result sent with the transaction id ``offload-<delegation id>-<part>`` (a retried send is
idempotent at the server), edits as ``m.replace``, and buttons: Matrix has none, so the last
part says which reaction means what, the bot reacts with each key itself (one click for a
person), and a reaction -- or a reply ``approve``/``deny`` to that message -- comes back as a
press. Encrypted rooms: the bot cannot read them (no maintained end-to-end library installs
from the registries, docs/gateway.md) and says so once per room, with how to make a new one.
"""
from __future__ import annotations

import logging
import re
import uuid
from typing import Any, Callable, Sequence

from offload.gateway.matrix.client import MatrixClient
from offload.gateway.matrix.ids import decode, encode
from offload.gateway.matrix.text import MAX_EVENT_BYTES, render_parts
from offload.gateway.platform import SENDING_RESULT, Incoming, Route, SendFailed
from offload.gateway.state import GatewayState

logger = logging.getLogger(__name__)
_SEEN_KEPT = 500
_KEYS = ("✅", "❌", "1️⃣", "2️⃣", "3️⃣")  # the reaction that presses button n
_SYNC_FILTER = ('{"room": {"timeline": {"limit": 100}, "state": {"lazy_load_members": true}},'
                ' "presence": {"types": []}, "account_data": {"types": []}}')
ENCRYPTED = ("I cannot read encrypted messages, and this room is encrypted: offload's Matrix gateway has no "
             "end-to-end encryption. Encryption cannot be turned off in a room once it is on; create a new room "
             "with encryption off (Element: Create room, then turn off 'Enable end-to-end encryption') and "
             "invite me there.")
_REPLY_FALLBACK = re.compile(r"\A(?:> .*\n)+\n", re.MULTILINE)


class MatrixPlatform:
    name = "matrix"
    delivers_later = True  # a bot may write to a room at any time

    def __init__(self, client: MatrixClient, state: GatewayState, inviters: set[str],
                 max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        """``inviters``: users whose invitations are accepted (the user allow-list)."""
        self.client, self.state, self.inviters, self.max_event_bytes = client, state, inviters, max_event_bytes
        self.user_id = client.user_id
        self._presses: dict[str, Route] = {}  # a reaction's event id -> where to answer it

    def joined_rooms(self) -> list[str]:
        """Rooms served because an allowed user invited the bot (escaped, as routes carry them)."""
        return [encode(room) for room in (self.state.read().get("invited_by") or {})]

    # -- receiving ---------------------------------------------------------------------------------
    def poll(self, timeout_s: float, handle: Callable[[Incoming], None]) -> int:
        since = self.state.read().get("since")
        first = not since
        sync = self.client.call("sync", lambda api: api.sync(since=since or None, timeout=0 if first else int(
            timeout_s * 1000), filter_id=_SYNC_FILTER))
        rooms = sync.get("rooms") or {}
        for room_id, room in (rooms.get("invite") or {}).items():
            try:
                self._invited(room_id, room)
            except SendFailed:
                raise  # the server is unreachable: this batch (and its token) is fetched again
            except Exception as exc:  # withdrawn meanwhile, refused: never fatal to polling
                logger.warning("could not answer the invitation to room %s: %s", room_id, exc)
        count = 0
        if not first:  # the first sync is history: answer invitations, hand over nothing
            for room_id, room in (rooms.get("join") or {}).items():
                events = [*((room.get("state") or {}).get("events") or []),
                          *((room.get("timeline") or {}).get("events") or [])]
                count += sum(self._event(room_id, evt, handle) for evt in events if isinstance(evt, dict))
        token = sync.get("next_batch")
        if token:
            self.state.update(lambda data: data.__setitem__("since", token))
        return count

    def _event(self, room_id: str, evt: dict[str, Any], handle: Callable[[Incoming], None]) -> int:
        event_id = str(evt.get("event_id") or "")
        if evt.get("sender") == self.user_id or not event_id or event_id in self._seen():
            return 0
        kind = evt.get("type")
        if kind in ("m.room.encrypted", "m.room.encryption"):
            self._tell_encrypted(room_id)
            message = None
        else:
            message = self._incoming(room_id, evt)
        if message is not None:
            handle(message)
        self.state.update(lambda data: data.__setitem__("seen", [*(data.get("seen") or []), event_id][-_SEEN_KEPT:]))
        return 1 if message is not None else 0

    def _seen(self) -> set[str]:
        return set(self.state.read().get("seen") or [])

    def _incoming(self, room_id: str, evt: dict[str, Any]) -> Incoming | None:
        content = evt.get("content") if isinstance(evt.get("content"), dict) else {}
        relates = content.get("m.relates_to") if isinstance(content.get("m.relates_to"), dict) else {}
        sender = str(evt.get("sender") or "")
        if evt.get("type") == "m.reaction" and relates.get("rel_type") == "m.annotation":
            return self._press(room_id, evt, str(relates.get("event_id") or ""), _KEYS.index(relates["key"])
                               if relates.get("key") in _KEYS else -1)
        if evt.get("type") != "m.room.message" or content.get("msgtype") not in ("m.text", "m.emote"):
            return None
        text = _REPLY_FALLBACK.sub("", str(content.get("body") or ""))
        replied = ((relates.get("m.in_reply_to") or {}).get("event_id") or "") if not relates.get(
            "is_falling_back") else ""
        choice = _choice(text)
        if replied and choice is not None:
            return self._press(room_id, evt, replied, choice)
        thread = str(relates.get("event_id") or "") if relates.get("rel_type") == "m.thread" else ""
        return Incoming(self._route(room_id, thread), "thread" if thread else "group", text,
                        user_id=sender, user_name=sender)

    def _press(self, room_id: str, evt: dict[str, Any], target: str, index: int) -> Incoming | None:
        """A reaction to (or a reply approve/deny to) one of our messages with buttons."""
        buttons = (self.state.read().get("buttons") or {}).get(target)
        if not buttons or not 0 <= index < len(buttons):
            return None  # a reaction to anything else is just a reaction
        where = buttons[index]
        route = Route(where[1], where[2])
        self._presses[evt["event_id"]] = route
        return Incoming(route, "thread" if route.thread_id else "group", "", user_id=str(evt.get("sender") or ""),
                        user_name=str(evt.get("sender") or ""), button=where[0], press_id=evt["event_id"],
                        message_id=target)

    def _route(self, room_id: str, thread: str = "") -> Route:
        return Route(encode(room_id), encode(thread) if thread else "")

    def _invited(self, room_id: str, room: dict[str, Any]) -> None:
        events = (room.get("invite_state") or {}).get("events") or []
        inviter = next((str(e.get("sender")) for e in events if e.get("type") == "m.room.member"
                        and e.get("state_key") == self.user_id), "")
        if inviter in self.inviters:
            self.client.call("join", lambda api: api.join_room_by_id(room_id))
            self.state.update(lambda data: data.setdefault("invited_by", {}).__setitem__(room_id, inviter))
            logger.info("joined room %s on the invitation of %s", room_id, inviter)
            if any(e.get("type") == "m.room.encryption" for e in events):
                self._tell_encrypted(room_id)
        else:
            self.client.call("decline", lambda api: api.leave_room(room_id, reason="offload serves only the users "
                                                                   "on gateway.matrix.allowed_user_ids"))
            logger.warning("declined the invitation of %s to room %s: not in gateway.matrix.allowed_user_ids",
                           inviter or "(unknown)", room_id)

    def _tell_encrypted(self, room_id: str) -> None:
        def first(data: dict[str, Any]) -> bool:
            told = data.setdefault("told_encrypted", [])
            if room_id in told:
                return False
            told.append(room_id)
            return True
        if self.state.update(first):
            try:
                self._send_content(room_id, {"msgtype": "m.notice", "body": ENCRYPTED}, f"offload-e2ee-{room_id}")
            except Exception as exc:
                logger.warning("could not tell room %s that it is encrypted: %s", room_id, exc)

    # -- sending -----------------------------------------------------------------------------------
    def send(self, route: Route, body: str, header: str = "", first_part: int = 0,
             on_part: Callable[[int], None] | None = None, buttons: Sequence[tuple[str, str]] = ()) -> list[str]:
        room, thread = decode(route.chat_id), decode(route.thread_id)
        if buttons:
            body += "\n\n" + ", ".join(f"react {key} to {label.lower()}" for key, (label, _) in zip(_KEYS, buttons)) \
                    + " (or reply " + " / ".join(label.lower() for label, _ in buttons) + ")"
        parts = render_parts(body, header, self.max_event_bytes)  # the same text splits the same way every time
        result = SENDING_RESULT.get()
        ids = []
        for number, content in enumerate(parts[first_part:], start=first_part + 1):
            if thread:
                content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
                                           "m.in_reply_to": {"event_id": thread}}
            txn = f"offload-{result}-{number}" if result else f"offload-{uuid.uuid4().hex}"
            ids.append(self._send_content(room, content, txn))
            if on_part is not None:
                on_part(number)
        if buttons and ids:
            self._offer(route, ids[-1], buttons)
        return ids

    def _offer(self, route: Route, event_id: str, buttons: Sequence[tuple[str, str]]) -> None:
        self.state.update(lambda data: data.setdefault("buttons", {}).__setitem__(
            event_id, [[data_, route.chat_id, route.thread_id] for _, data_ in buttons]))
        for key, _ in zip(_KEYS, buttons):  # the bot's own reactions: a person clicks one
            content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
            self.client.call("react", lambda api, c=content, k=key: api.send_message_event(
                decode(route.chat_id), "m.reaction", c, txn_id=f"offload-react-{event_id}-{_KEYS.index(k)}"))

    def _send_content(self, room: str, content: dict[str, Any], txn: str) -> str:
        return str(self.client.call("send", lambda api: api.send_message_event(room, "m.room.message", content,
                                                                               txn_id=txn)))

    def edit(self, route: Route, message_id: str, body: str, header: str = "") -> None:
        new = render_parts(body, header, self.max_event_bytes)[0]  # a roster bubble stays one message
        content = {"msgtype": new["msgtype"], "body": "* " + new["body"], "format": new["format"],
                   "formatted_body": "* " + new["formatted_body"], "m.new_content": new,
                   "m.relates_to": {"rel_type": "m.replace", "event_id": message_id}}
        self._send_content(decode(route.chat_id), content, f"offload-{uuid.uuid4().hex}")

    def answer_button(self, press_id: str, text: str) -> None:
        route = self._presses.pop(press_id, None)
        if route is not None:
            thread = decode(route.thread_id)
            content: dict[str, Any] = {"msgtype": "m.notice", "body": text}
            if thread:
                content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
                                           "m.in_reply_to": {"event_id": thread}}
            self._send_content(decode(route.chat_id), content, f"offload-answer-{press_id}")


def _choice(text: str) -> int | None:
    """A reply that answers buttons: "approve"/"yes" presses the first, "deny"/"no" the second."""
    word = text.strip().lstrip("/").split(maxsplit=1)[0].lower() if text.strip() else ""
    return {"approve": 0, "allow": 0, "yes": 0, "deny": 1, "no": 1}.get(word)

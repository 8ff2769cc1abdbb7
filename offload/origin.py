"""``Origin``: who a delegation's result belongs to -- captured once, carried whole.

The routing identity of a ``delegate_task`` call is captured once, in the tool call before any
child is built (``offload.subagents.dispatch.capture_origin``), and travels under the one name
``origin``: ``UnitSpec.origin`` → the engine's record → the ledger row (``task["origin"]``) →
every event of the unit (``evt["origin"]``) → the consumer (chat inbox, gateway watcher and
runner, dashboard), which selects by it instead of re-deriving it from a session key.

Wire form: ``to_json()`` is a flat JSON object holding only the fields that are set;
``from_json`` reads it back (unknown keys are ignored, so a newer writer never breaks this
reader). Rows and events written before ``origin`` existed carry the same facts as loose flat
fields (``session_key`` / the row's ``origin_session``, ``origin_ui_session_id``,
``origin_session_id``, ``parent_session_id``, ``scope_id``/``user_id``/``user_name``);
``from_flat`` reads those, and ``flat()`` writes them, so a previous version still reads what
this one writes.

Invariant: an ``Origin`` is frozen and every field is a ``str`` ("" = not known), except
``parent_session_id`` (None = no parent session; "" is read as None). ``of_event``/``of_row`` are total -- they
never raise, because consumers call them inside delivery loops on JSON read back from the
ledger; a malformed ``origin`` falls back to the flat fields.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

# Only direct messages and threads carry a thread id in a gateway key's sixth part. For group and
# channel keys the sixth part may be a per-user id, and routing a reply to it as a thread would
# send the result to the wrong place.
THREADED_CHAT_TYPES = frozenset({"dm", "thread"})
# The chat-independent identity fields a record/event carried flat before ``origin`` existed.
IDENTITY_KEYS = ("scope_id", "user_id", "user_name")


def parse_session_key(key: object) -> dict[str, str] | None:
    """``{"platform", "chat_type", "chat_id"[, "thread_id"]}`` of a gateway session key
    (``agent:main:<platform>:<chat_type>:<chat_id>[:<sixth>...]``), or None if ``key`` is not
    routable (an empty key: the CLI or a desktop UI, which have no chat). Pure and total: for any
    input the values are non-empty strings without ``:``."""
    if not isinstance(key, str) or not key:
        return None
    parts = key.split(":")
    if len(parts) < 5 or parts[0] != "agent" or parts[1] != "main":
        return None
    platform, chat_type, chat_id = parts[2], parts[3], parts[4]
    if not (platform and chat_type and chat_id):
        return None  # an empty field would route to no platform/chat at all
    route = {"platform": platform, "chat_type": chat_type, "chat_id": chat_id}
    if chat_type in THREADED_CHAT_TYPES and len(parts) > 5 and parts[5]:
        route["thread_id"] = parts[5]
    return route


@dataclass(frozen=True)
class Origin:
    """The routing identity of one delegate_task call (see the module docstring)."""

    session_key: str = ""  # the parent's session (a gateway chat key, or a session id); "" = CLI
    parent_session_id: str | None = None  # the parent agent's session id when it called
    ui_session_id: str = ""  # the desktop UI tab that started it (today's origin_ui_session_id)
    wake_session_id: str = ""  # a stateless channel's raw session id to wake (today's origin_session_id)
    platform: str = ""  # chat routing, captured with the key: platform, chat type, chat, thread
    chat_type: str = ""
    chat_id: str = ""
    thread_id: str = ""
    scope_id: str = ""
    user_id: str = ""
    user_name: str = ""

    def __post_init__(self) -> None:
        if self.parent_session_id == "":
            object.__setattr__(self, "parent_session_id", None)  # one form for "no parent"
        for name in _FIELD_NAMES:
            value = getattr(self, name)
            if not isinstance(value, str) and not (name == "parent_session_id" and value is None):
                raise TypeError(f"Origin.{name} must be a string, got {type(value).__name__} {value!r}")

    @classmethod
    def capture(cls, session_key: str, parent_session_id: str | None = None, *, ui_session_id: str = "",
                wake_session_id: str = "", **identity: str) -> Origin:
        """An origin whose chat routing is read from ``session_key`` once, here, so no consumer
        has to parse it again. ``identity``: ``scope_id``/``user_id``/``user_name``."""
        route = parse_session_key(session_key) or {}
        return cls(session_key or "", parent_session_id, ui_session_id or "", wake_session_id or "",
                   **route, **{k: v or "" for k, v in identity.items()})

    # -- wire form --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, str]:
        """The JSON object (only the fields that are set)."""
        return {name: value for name in _FIELD_NAMES if (value := getattr(self, name)) not in ("", None)}

    @classmethod
    def from_json(cls, obj: object) -> Origin:
        """Read ``to_json()``'s form back. Raises ``ValueError`` naming the problem when ``obj``
        is not an object of string fields."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"an origin must be a JSON object, got {type(obj).__name__}: {obj!r}")
        try:
            return cls(**{k: v for k, v in obj.items() if k in _KNOWN})
        except TypeError as exc:
            raise ValueError(f"unreadable origin {dict(obj)!r}: {exc}") from None

    # -- the flat fields of the previous version ---------------------------------------------------
    @classmethod
    def from_flat(cls, flat: Mapping[str, Any], session_key: Any = None) -> Origin:
        """The origin of a record, event or task written with flat fields only; ``session_key``:
        the row's ``origin_session`` column when the mapping has no ``session_key``."""
        key = flat.get("session_key") if session_key is None else session_key
        parent = flat.get("parent_session_id")
        return cls.capture(_text(key), None if parent in (None, "") else _text(parent),
                           ui_session_id=_text(flat.get("origin_ui_session_id")),
                           wake_session_id=_text(flat.get("origin_session_id")),
                           **{k: _text(flat.get(k)) for k in IDENTITY_KEYS})

    def flat(self) -> dict[str, Any]:
        """The flat fields a previous version reads (and the hermes-shaped records and events
        expose): always the four session fields, the identity fields when set."""
        out: dict[str, Any] = {"session_key": self.session_key, "parent_session_id": self.parent_session_id,
                               "origin_ui_session_id": self.ui_session_id, "origin_session_id": self.wake_session_id}
        out.update({k: getattr(self, k) for k in IDENTITY_KEYS if getattr(self, k)})
        return out

    @classmethod
    def of_event(cls, evt: Mapping[str, Any]) -> Origin:
        """The origin an event (or record, or task) carries: its ``origin`` object, else (written
        by a previous version, or malformed) its flat fields. Never raises."""
        carried = evt.get("origin") if isinstance(evt, Mapping) else None
        if isinstance(carried, Mapping):
            try:
                return cls.from_json(carried)
            except ValueError:
                pass
        return cls.from_flat(evt if isinstance(evt, Mapping) else {})

    @classmethod
    def of_row(cls, row: Any) -> Origin:
        """The origin of a ledger row (``DispatchRow``/``LedgerRow``): the one its task carries,
        else (a row of a previous version) its session columns and its task's identity fields.
        Never raises."""
        task = getattr(row, "task", None)
        task = task if isinstance(task, Mapping) else {}
        if isinstance(task.get("origin"), Mapping):
            return cls.of_event(task)
        columns = {"parent_session_id": getattr(row, "parent_session_id", None),
                   "origin_ui_session_id": getattr(row, "origin_ui_session_id", ""),
                   "origin_session_id": getattr(row, "origin_session_id", "")}
        return cls.from_flat({**{k: task.get(k) for k in IDENTITY_KEYS}, **columns},
                             session_key=getattr(row, "origin_session", "") or "")

    # -- what consumers select by -----------------------------------------------------------------
    def chat(self) -> dict[str, str] | None:
        """``{"platform", "chat_type", "chat_id"[, "thread_id"]}`` when the result goes back to a
        chat, else None (CLI, desktop UI, a woken raw session)."""
        if not (self.platform and self.chat_type and self.chat_id):
            return None
        route = {"platform": self.platform, "chat_type": self.chat_type, "chat_id": self.chat_id}
        if self.thread_id:
            route["thread_id"] = self.thread_id
        return route

    def belongs_to(self, session_id: str) -> bool:
        """Whether ``session_id`` is this origin's session (its key, parent or wake session)."""
        return bool(session_id) and session_id in (self.session_key, self.parent_session_id, self.wake_session_id)


# Read once: ``dataclasses.fields`` rebuilds its tuple on every call, and an origin is built and
# written several times per delegation on the dispatch hot path (bench case 1).
_FIELD_NAMES = tuple(f.name for f in fields(Origin))
_KNOWN = frozenset(_FIELD_NAMES)


def _text(value: Any) -> str:
    return "" if value is None else str(value)

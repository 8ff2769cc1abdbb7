"""How every ledger backend stores the JSON columns (task, event, result) and turns a stored
row back into a ``LedgerRow``. Pure; one source so all backends decode rows identically.

A row's JSON columns are parsed when a reader first touches them (``LazyJson``), so replay
decodes only each pending row's event. Invariant: what a backend stores reads back equal,
including foreign objects (stored as their ``str``) and lone surrogates from model output
(stored escaped), and an unreadable column reads back as ``None`` instead of failing the row.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from offload.ledger.protocol import LedgerRow, StoredJson, parse_json


# Built once: ``json.dumps`` with any option builds a new encoder per call.
_ENCODE = json.JSONEncoder(default=str, ensure_ascii=False, separators=(",", ":")).encode
_ENCODE_ASCII = json.JSONEncoder(default=str, ensure_ascii=True, separators=(",", ":")).encode


def dumps(obj: Any) -> str:
    # default=str: a foreign object in a runner's result must not cost the whole record.
    text = _ENCODE(obj)
    if text.isascii():  # the usual case, and a flag check: nothing to re-encode
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate ("\ud800" is valid JSON, and model output carries it) cannot be
        # stored as UTF-8 text; escaped JSON stores it and reads back the identical string.
        text = _ENCODE_ASCII(obj)
    return text


loads = parse_json  # one parser for a JSON column, eager (here) or on first read (``LazyJson``)


def _stored(raw: Any) -> Any:
    """A JSON column as the row keeps it until read: text stays text (parsed on first use)."""
    return StoredJson(raw) if isinstance(raw, str) and raw else parse_json(raw)


def decode_row(raw: Mapping[str, Any]) -> LedgerRow:
    """A ``LedgerRow`` from stored columns keyed by name (``task_json`` etc. as JSON text)."""
    return LedgerRow(
        delegation_id=raw["delegation_id"], origin_session=raw["origin_session"] or "", state=raw["state"],
        dispatched_at=raw["dispatched_at"], completed_at=raw["completed_at"], updated_at=raw["updated_at"],
        origin_ui_session_id=raw["origin_ui_session_id"] or "", origin_session_id=raw["origin_session_id"] or "",
        parent_session_id=raw["parent_session_id"], task=_stored(raw["task_json"]), event=_stored(raw["event_json"]),
        result=_stored(raw["result_json"]), delivery_state=raw["delivery_state"],
        delivery_attempts=raw["delivery_attempts"], delivered_at=raw["delivered_at"],
        delivery_claim=raw["delivery_claim"], delivery_claimed_at=raw["delivery_claimed_at"],
        owner_pid=raw["owner_pid"], owner_started_at=raw["owner_started_at"],
        delivery_claim_pid=raw.get("delivery_claim_pid"), delivery_claim_started_at=raw.get("delivery_claim_started_at"),
        delivery_progress=raw.get("delivery_progress") or 0, drop_reason=raw.get("drop_reason"),
        **({"extra": {"owner_epoch": raw["owner_epoch"]}} if raw.get("owner_epoch") is not None else {}),
    )

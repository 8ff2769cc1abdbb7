"""Matrix ids inside gateway session keys.

Session keys are split on ":" (``offload.origin.parse_session_key``) and Matrix ids contain
":" (``!room:server``, ``$event:server`` in old room versions). A Matrix route carries its room
and thread ids escaped -- "%" as "%25", ":" as "%3A" -- so a key such as
``agent:main:matrix:thread:!abc%3Aexample.org:$root`` parses back to the room and the thread a
reply must go to. Telegram's keys never contain either character, so they stay byte-for-byte.
Invariant: ``decode(encode(x)) == x`` for every string, and ``encode`` never yields ":".
"""
from __future__ import annotations

import re

_ESCAPE = re.compile(r"%(25|3A)")


def encode(matrix_id: str) -> str:
    return matrix_id.replace("%", "%25").replace(":", "%3A")


def decode(escaped: str) -> str:
    return _ESCAPE.sub(lambda m: "%" if m.group(1) == "25" else ":", escaped)

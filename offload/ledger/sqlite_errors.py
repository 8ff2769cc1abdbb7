"""What a raw SQLite or OS error means for the ledger and the session store: one kind per
cause (``locked``, ``corrupt``, ``full``, ``unwritable``, ``error``).

Invariant: the kind is decided by code (``sqlite_errorcode``, ``errno``), never by searching an
OSError's message, which holds the user's path; only a code-less sqlite error (whose message
never holds a path) is read by its words.
"""
from __future__ import annotations

import errno

# Primary SQLite result codes (the low byte of ``sqlite_errorcode``) and errnos, by kind.
_SQLITE_KINDS = {5: "locked", 6: "locked", 11: "corrupt", 26: "corrupt", 13: "full",
                 3: "unwritable", 8: "unwritable", 14: "unwritable"}
_ERRNO_KINDS = {errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EACCES: "unwritable", errno.EPERM: "unwritable",
                errno.EROFS: "unwritable", errno.ENOTDIR: "unwritable", errno.EEXIST: "unwritable",
                errno.EISDIR: "unwritable"}


def error_kind(exc: BaseException) -> str:
    # Decide by code, never by searching the message: an OSError's message contains the
    # user's path, and a home like /home/fullstack must not turn "permission denied" into
    # "disk full".
    if isinstance(exc, OSError):
        return _ERRNO_KINDS.get(exc.errno, "error")
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return _SQLITE_KINDS.get(code & 0xFF, "error")
    text = str(exc).lower()  # an sqlite error without a code: its message never holds a path
    for kind, words in (("locked", ("locked", "busy")), ("corrupt", ("not a database", "malformed", "corrupt")),
                        ("full", ("full",)), ("unwritable", ("readonly", "read-only", "unable to open"))):
        if any(word in text for word in words):
            return kind
    return "error"


def is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` means another connection holds the file (SQLITE_BUSY / SQLITE_LOCKED)."""
    return error_kind(exc) == "locked"

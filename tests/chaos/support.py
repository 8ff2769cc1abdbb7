"""Chaos suite helpers: bounded vs long mode, seeds, waiting, and the counts report.

``OFFLOAD_CHAOS_LONG=1`` selects the long run (500 kill trials, bigger races); the default
is the bounded CI run. ``OFFLOAD_CHAOS_SEED`` replays a run (every failure prints the seed to
use). Tests add their counts with :func:`report`; the totals are printed at the end of the
session (whatever ``-s`` says) and written to ``chaos-counts.json`` in pytest's base temp dir.
"""
from __future__ import annotations

import logging
import os
import random
import time
from typing import Any

from tests.engine.conftest import drain_queue  # noqa: F401 - one drain helper for every engine test

LONG = os.environ.get("OFFLOAD_CHAOS_LONG", "").strip() not in ("", "0", "false", "no")
ENGINE_LOGGER = "offload.engine"

COUNTS: dict[str, dict[str, Any]] = {}


def scaled(bounded: int, long: int) -> int:
    return long if LONG else bounded


def base_seed() -> int:
    raw = os.environ.get("OFFLOAD_CHAOS_SEED", "").strip()
    return int(raw) if raw else random.SystemRandom().randrange(1, 2**31)


def report(section: str, **counts: Any) -> None:
    """Record counts for the end-of-session summary (later calls add to numbers)."""
    bucket = COUNTS.setdefault(section, {})
    for key, value in counts.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(bucket.get(key), (int, float)):
            bucket[key] += value
        else:
            bucket[key] = value


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def engine_errors(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ENGINE_LOGGER and r.levelno >= logging.ERROR]


def summary_lines() -> list[str]:
    return [f"{section}: " + ", ".join(f"{k}={v}" for k, v in counts.items()) for section, counts in sorted(COUNTS.items())]

"""Spread and ratios. Every headline is a per-round ratio of two measurements taken in the
same round, summarized over rounds by median and p95; raw figures get the same summary.
Pure functions, no clock.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks; NaN for no values."""
    data = sorted(float(v) for v in values)
    if not data:
        return math.nan
    if len(data) == 1:
        return data[0]
    rank = (len(data) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def median(values: Iterable[float]) -> float:
    return percentile(values, 50.0)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median and p95 over rounds (plus min/max and the count, for the JSON)."""
    data = [float(v) for v in values]
    return {"median": median(data), "p95": percentile(data, 95.0),
            "min": min(data) if data else math.nan, "max": max(data) if data else math.nan, "n": len(data)}


def ratio(numerator: float, denominator: float) -> float:
    if denominator == 0 or math.isnan(denominator) or math.isnan(numerator):
        return math.nan
    return numerator / denominator


def per_round_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Ratio of each round's numerator to the same round's denominator."""
    if len(numerators) != len(denominators):
        raise ValueError(f"rounds differ: {len(numerators)} numerators, {len(denominators)} denominators")
    return [ratio(n, d) for n, d in zip(numerators, denominators)]


def headline(name: str, numerators: Sequence[float], denominators: Sequence[float], *,
             target_max: float | None, target: str, note: str = "") -> dict[str, Any]:
    """One headline figure: per-round ratios summarized, and whether the median meets the target."""
    values = per_round_ratios(numerators, denominators)
    summary = spread(values)
    met = None if target_max is None else bool(summary["median"] <= target_max)
    return {"name": name, **summary, "rounds": values, "unit": "ratio", "target": target, "target_max": target_max,
            "met": met, "note": note}


def to_ms(seconds: float) -> float:
    return seconds * 1000.0


def to_us(seconds: float) -> float:
    return seconds * 1_000_000.0


def check(name: str, values: Sequence[float], *, unit: str, target_max: float, target: str,
          note: str = "") -> dict[str, Any]:
    """An absolute target the issue states (e.g. "under 10 ms"), reported beside the ratios."""
    summary = spread(values)
    return {"name": name, **summary, "rounds": list(values), "unit": unit, "target": target,
            "target_max": target_max, "met": bool(summary["median"] <= target_max), "note": note}

"""Reading a tool's arguments and settings, with errors that say who must act.

Owns the two rules every child toolset shares:

* A bad *argument* is the model's to fix, so it raises ``ToolError`` naming the argument and
  what a valid value looks like.
* A bad *setting* is the operator's to fix, so it raises ``ToolError`` naming the settings key.
  A setting outside its documented bounds is clamped, so a generous config can never lift a
  hard ceiling (e.g. the 600 s terminal limit).

Invariant: the numeric readers never return a value outside ``[minimum, maximum]``.
"""
from __future__ import annotations

from typing import Any, Iterable

from offload.toolsets.toolspec import ToolError


def reject_unknown(args: dict[str, Any], allowed: Iterable[str], tool: str) -> None:
    """Refuse arguments the tool does not define, so a typo is not silently ignored."""
    allowed_set = set(allowed)
    unknown = sorted(set(args) - allowed_set)
    if unknown:
        raise ToolError(
            f"{tool}: unknown argument(s) {', '.join(unknown)}; "
            f"the allowed arguments are {', '.join(sorted(allowed_set))}."
        )


def require_str(args: dict[str, Any], name: str, tool: str, *, allow_empty: bool = False) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError(f"{tool}: argument '{name}' is required and must be a string.")
    if not allow_empty and not value.strip():
        raise ToolError(f"{tool}: argument '{name}' must not be empty.")
    return value


def optional_str(args: dict[str, Any], name: str, tool: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"{tool}: argument '{name}' must be a string when given.")
    return value


def optional_bool(args: dict[str, Any], name: str, tool: str, default: bool) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ToolError(f"{tool}: argument '{name}' must be true or false.")
    return value


def optional_number(
    args: dict[str, Any], name: str, tool: str, *, minimum: float, maximum: float
) -> float | None:
    """A numeric argument the model may omit; out of range is refused, not clamped."""
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(f"{tool}: argument '{name}' must be a number.")
    if not minimum <= value <= maximum:
        raise ToolError(f"{tool}: argument '{name}' must be between {minimum:g} and {maximum:g}; got {value:g}.")
    return float(value)


def optional_int(args: dict[str, Any], name: str, tool: str, *, minimum: int, maximum: int) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"{tool}: argument '{name}' must be a whole number.")
    if not minimum <= value <= maximum:
        raise ToolError(f"{tool}: argument '{name}' must be between {minimum} and {maximum}; got {value}.")
    return value


def setting_number(
    settings: dict[str, Any], key: str, default: float, *, minimum: float, maximum: float
) -> float:
    """A numeric setting, clamped to its bounds; a non-number is an operator error."""
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(
            f"The setting '{key}' is {value!r}, which is not a number; the operator must fix it "
            f"in the agent's settings (default {default:g})."
        )
    return float(min(max(value, minimum), maximum))


def setting_int(settings: dict[str, Any], key: str, default: int, *, minimum: int, maximum: int) -> int:
    return int(setting_number(settings, key, default, minimum=minimum, maximum=maximum))

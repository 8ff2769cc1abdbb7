"""Spend caps of subagents: tokens and US dollars, per delegation, per session and per day
(``delegation.max_tokens_*``, ``delegation.max_cost_usd_*``).

Owns ``SpendStore`` (what subagents used, per UTC day, parent session and delegate_task call, in
the ledger's ``async_delegation_spend`` table, so every process on one ledger -- a worker on
another host included -- counts in one place: tokens, the reported cost, and the model calls
whose cost was not reported), ``DelegationBudget`` (the budget the children of one delegate_task
call share, which charges the store as they go), ``call_budget`` (a call's budget from its
config) and the refusal text of ``delegate_task`` for a session or a day over its budget.

Invariants: only usage a server reported is counted as tokens (a server that reports none spends
no tokens, see docs/delegate-task.md); a cost that was not reported is unknown, never 0: while
any cost cap is set, such a call stops its child before its next model call, and a session or
day with such calls is refused by its cost cap. A child stops before its next model call once
its delegation's budget is used up (the call that crosses it completes), with its partial
result and the notice ``exhausted()`` returns; a failing spend write is logged and never fails
a child, a failing read refuses the call (its caps cannot be checked). A unit queued in the
ledger (for ``offload worker``, or at capacity) carries its budget and its call's id
(``to_spec``); the process that runs it -- a worker, or an owner that adopted it after its own
died -- charges the same session, day and call, and stops its children on the call's total in
the ledger, so the units of one split call share one per-delegation budget wherever they run.
A nested call (a subagent's own delegate_task, ``offload.subagents.lineage``) books its spend to
the root session and charges its ancestors' budgets too (``parent``): a grandchild stops when
its call's budget or any ancestor's is used up. The session and day caps refuse a call at
dispatch and also stop running children before their next model call once crossed (a read
failure there is logged and the children go on under their delegation budgets).
"""
from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, Callable, Mapping

from offload.ledger import LedgerError

logger = logging.getLogger(__name__)

COST_KEYS = ("max_cost_usd_per_delegation", "max_cost_usd_per_session", "max_cost_usd_per_day")
SCOPE_KEYS = ("max_tokens_per_session", "max_tokens_per_day", "max_cost_usd_per_session", "max_cost_usd_per_day")


def reported_tokens(usage: Mapping[str, Any] | None) -> int:
    """Prompt plus completion tokens of one model call's reported usage (0 when none)."""
    total = 0
    for key in ("prompt_tokens", "completion_tokens"):
        value = (usage or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total


def reported_cost(usage: Mapping[str, Any] | None) -> float | None:
    """One model call's cost in USD as its provider reported it, or None: unknown (not 0)."""
    cost = (usage or {}).get("cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
        return float(cost)
    return None


def usd(amount: float) -> str:
    return f"${amount:.6f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Spend:
    """What subagents used in one scope (a session, or a day)."""

    tokens: int = 0
    cost_usd: float = 0.0
    cost_unknown_calls: int = 0  # model calls whose provider reported no cost


class SpendStore:
    """What subagents used, per UTC day, parent session and call, in the ledger ``ledger()``
    returns (``offload.ledger.spend_table``)."""

    def __init__(self, ledger: Callable[[], Any], clock: Callable[[], float] = time.time) -> None:
        self.ledger, self.clock = ledger, clock

    def today(self) -> str:
        return datetime.fromtimestamp(self.clock(), tz=timezone.utc).strftime("%Y-%m-%d")

    def add(self, session_key: str, tokens: int, cost_usd: float = 0.0, cost_unknown_calls: int = 0,
            call_id: str = "") -> None:
        if tokens <= 0 and cost_usd <= 0 and cost_unknown_calls <= 0:
            return
        try:
            self.ledger().add_spend(self.today(), session_key, call_id, (tokens, cost_usd, cost_unknown_calls),
                                    self.clock())
        except LedgerError:
            logger.warning("could not record subagent spend (%d tokens, cost %s)", tokens, usd(cost_usd), exc_info=True)

    def spend(self, session_key: str) -> tuple[Spend, Spend]:
        """(what this session's subagents used, what all subagents used today). Raises LedgerError."""
        session, day = self.ledger().spend_totals([("session_key", session_key), ("day", self.today())])
        return Spend(*session), Spend(*day)

    def call_spend(self, call_id: str) -> Spend:
        """What the units of one delegate_task call used, in every process. Raises LedgerError."""
        [spent] = self.ledger().spend_totals([("call_id", call_id)])
        return Spend(*spent)

    def totals(self, session_key: str) -> tuple[int, int]:
        """(tokens this session's subagents used, tokens all subagents used today)."""
        session, day = self.spend(session_key)
        return session.tokens, day.tokens


class DelegationBudget:
    """The budget the children of one delegate_task call share: ``cap`` tokens and ``cost_cap``
    USD (None: no cap); ``cost_guard`` names the cost caps in force (any of them makes a call of
    unknown cost stop the children). Every charge also goes to ``store`` under the session, the
    day and ``call_id``. ``shared``: units of this call may run in other processes (a budget
    rebuilt from a queued row), so the call's total is read from the store, not kept here.
    Thread-safe."""

    def __init__(self, cap: int | None, store: SpendStore | None, session_key: str, *,
                 cost_cap: float | None = None, cost_guard: str | None = None, call_id: str | None = None,
                 shared: bool = False, parent: DelegationBudget | None = None,
                 scopes: Mapping[str, Any] | None = None) -> None:
        self.cap, self.store, self.session_key = cap, store, session_key
        self.cost_cap = cost_cap
        self.cost_guard = cost_guard or ("delegation.max_cost_usd_per_delegation" if cost_cap is not None else None)
        self.call_id = call_id or f"call_{secrets.token_hex(8)}"
        self.shared = shared and store is not None
        self.parent = parent  # the budget of the call that built the agent making this call (lineage)
        # The session and day caps in force: checked before each model call too, not only at dispatch.
        self.scopes = {k: v for k, v in (scopes or {}).items() if k in SCOPE_KEYS and v is not None}
        self.used, self.cost_usd, self.cost_unknown_calls = 0, 0.0, 0
        self.below = (0, 0.0, 0)  # what descendant calls charged here (in this process)
        self._lock = threading.Lock()

    def charge(self, usage: Mapping[str, Any] | None, interrupted: bool = False) -> None:
        """Count one model call, here and in every ancestor's budget. ``interrupted``: this side
        cut the call short (an interrupt, a stop) before its server could send usage; a missing
        cost there says nothing about the provider, and the child is stopping anyway, so it is
        not counted as unknown."""
        tokens, cost = reported_tokens(usage), reported_cost(usage)
        unknown = 1 if cost is None and not interrupted else 0
        with self._lock:
            self.used += tokens
            self.cost_unknown_calls += unknown
            self.cost_usd += cost or 0.0
        ancestor = self.parent
        while ancestor is not None:
            ancestor._absorb(tokens, cost or 0.0, unknown)
            ancestor = ancestor.parent
        if self.store is not None:  # once, under this call: the session and day totals count it once
            self.store.add(self.session_key, tokens, cost or 0.0, unknown, call_id=self.call_id)

    def _absorb(self, tokens: int, cost: float, unknown: int) -> None:
        with self._lock:
            self.below = (self.below[0] + tokens, self.below[1] + cost, self.below[2] + unknown)

    def to_spec(self) -> dict[str, Any]:
        """What a queued unit's row carries of this budget, for the process that will run it."""
        spec = {"max_tokens": self.cap, "max_cost_usd": self.cost_cap, "cost_guard": self.cost_guard,
                "session_key": self.session_key, "counted": self.store is not None, "call_id": self.call_id,
                **({"scopes": self.scopes} if self.scopes else {})}
        return {**spec, "parent": self.parent.to_spec()} if self.parent is not None else spec

    def _spent(self) -> tuple[int, float, int]:
        """(tokens, USD, calls of unknown cost) this call and its descendants' calls used: this
        call's in every process when shared, its descendants' in this one."""
        with self._lock:
            below = self.below
        tokens, cost, unknown = self._own()
        return tokens + below[0], cost + below[1], unknown + below[2]

    def _own(self) -> tuple[int, float, int]:
        if self.shared:
            try:
                spent = self.store.call_spend(self.call_id)
                return spent.tokens, spent.cost_usd, spent.cost_unknown_calls
            except LedgerError:  # this process's own share is still a floor
                logger.warning("could not read delegation %s's spend; counting this process's share", self.call_id,
                               exc_info=True)
        with self._lock:
            return self.used, self.cost_usd, self.cost_unknown_calls

    def exhausted(self) -> str | None:
        """The notice for a child that must stop now, or None while there is budget left."""
        stop = self.stop()
        return stop[1] if stop else None

    def stop(self) -> tuple[str, str] | None:
        """(exit reason, notice) for a child that must stop now -- ``token_budget``, or
        ``cost_budget`` (also for a cost that was not reported) -- or None. A call's budget or
        any ancestor's being used up stops it, and so does its (root) session's or the day's."""
        return self._chain_stop() or self._scope_stop()

    def _chain_stop(self) -> tuple[str, str] | None:
        own = self._stop_here()
        return own if own is not None or self.parent is None else self.parent._chain_stop()

    def _scope_stop(self) -> tuple[str, str] | None:
        """The session or day cap crossed while this call's children run (a read failure is
        logged and lets them go on: their own budgets still hold)."""
        if not self.scopes or self.store is None:
            return None
        try:
            session, day = self.store.spend(self.session_key)
        except LedgerError:
            logger.warning("could not read the session's and day's spend; checking them at the next call", exc_info=True)
            return None
        refusal = _scope_refusal(SimpleNamespace(**{k: self.scopes.get(k) for k in SCOPE_KEYS}), session, day,
                                 self.store.today())
        if refusal is None:
            return None
        reason = "cost_budget" if "max_cost_usd_per_" in refusal else "token_budget"
        return reason, ("stopped before its next model call (the output below is what it had so far): "
                        + refusal.removeprefix("not dispatched: "))

    def _stop_here(self) -> tuple[str, str] | None:
        used, cost, unknown = self._spent()
        stop = "so no further model call was made; the output below is what it had so far."
        if self.cap is not None and used >= self.cap:
            return "token_budget", (f"stopped at its token budget: this delegation's subagents used {used} tokens of "
                    f"delegation.max_tokens_per_delegation={self.cap}, {stop} Delegate the unfinished part again, "
                    "or the operator raises the budget "
                    f"(offload config set delegation.max_tokens_per_delegation {self.cap * 2})")
        if self.cost_guard and unknown:
            return "cost_budget", (f"stopped: a cost cap is set ({self.cost_guard}) but the provider did not report the cost of "
                    f"{unknown} of this delegation's model calls, so the spend cannot be checked against it and "
                    f"is never taken as 0; {stop} The operator must use a provider that reports cost (OpenRouter, "
                    "or a LiteLLM proxy with include_cost_in_streaming_usage) or remove the cost caps "
                    "(offload config set delegation.max_cost_usd_per_... null)")
        if self.cost_cap is not None and cost >= self.cost_cap:
            return "cost_budget", (f"stopped at its cost budget: this delegation's subagents spent {usd(cost)} of "
                    f"delegation.max_cost_usd_per_delegation={usd(self.cost_cap)}, {stop} Delegate the unfinished "
                    "part again, or the operator raises the budget "
                    f"(offload config set delegation.max_cost_usd_per_delegation {self.cost_cap * 2:g})")
        return None


def call_budget(cfg: Any, spend: SpendStore | None, session_key: str,
                parent: DelegationBudget | None = None) -> DelegationBudget | None:
    """The budget of one delegate_task call under ``cfg`` (a ``DelegationConfig``), or None when
    nothing is capped and no ancestor call has a budget (then nothing is written per model
    call). While any cap is set, spend is counted in ``spend`` under ``session_key`` (the root
    session of a nested call): the session and day caps read it, and so do the call's units that
    run in other processes. ``parent``: the budget of the call that built the calling subagent."""
    scoped = (cfg.max_tokens_per_session, cfg.max_tokens_per_day, cfg.max_cost_usd_per_session, cfg.max_cost_usd_per_day)
    guard = ", ".join(f"delegation.{key}={getattr(cfg, key):g}" for key in COST_KEYS if getattr(cfg, key) is not None)
    if cfg.max_tokens_per_delegation is None and all(v is None for v in scoped) and not guard and parent is None:
        return None
    return DelegationBudget(cfg.max_tokens_per_delegation, spend, session_key,
                            cost_cap=cfg.max_cost_usd_per_delegation, cost_guard=guard or None, parent=parent,
                            scopes={key: getattr(cfg, key) for key in SCOPE_KEYS})


def budget_from_spec(spec: Any, store: SpendStore | None, _levels: int = 8) -> DelegationBudget | None:
    """The budget of a unit rebuilt from its ledger row (``DelegationBudget.to_spec``), counted in
    ``store`` (the running process's ledger) when the dispatching host counted, and sharing the
    call's total with its other units through it, with its ancestors' (``parent``, at most
    ``_levels`` deep: max_spawn_depth is 5 at most); None: the row has none."""
    if not isinstance(spec, Mapping) or _levels <= 0:
        return None  # queued before budgets travelled, or by a call without any
    cap = spec.get("max_tokens")
    cap = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None
    cost_cap = reported_cost({"cost_usd": spec.get("max_cost_usd")})
    guard = spec.get("cost_guard") if isinstance(spec.get("cost_guard"), str) else None
    counted = store if spec.get("counted") else None
    parent = budget_from_spec(spec.get("parent"), store, _levels - 1)
    if cap is None and counted is None and cost_cap is None and not guard and parent is None:
        return None
    call_id = spec.get("call_id") if isinstance(spec.get("call_id"), str) and spec.get("call_id") else None
    scopes = spec.get("scopes") if isinstance(spec.get("scopes"), Mapping) else {}
    scopes = {k: v for k, v in scopes.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0}
    return DelegationBudget(cap, counted, str(spec.get("session_key") or ""), cost_cap=cost_cap, cost_guard=guard,
                            call_id=call_id, shared=call_id is not None, parent=parent, scopes=scopes)


def over_budget(cfg: Any, store: SpendStore | None, session_key: str) -> str | None:
    """Why delegate_task refuses this session now (its budget or the day's is used up, or its
    cost is unknown under a cost cap), or None. ``cfg``: a ``DelegationConfig``."""
    limits = (cfg.max_tokens_per_session, cfg.max_tokens_per_day, cfg.max_cost_usd_per_session, cfg.max_cost_usd_per_day)
    if store is None or all(v is None for v in limits):
        return None
    try:
        session, day = store.spend(session_key)
    except LedgerError as exc:
        return (f"not dispatched: the spend caps are set but what subagents spent could not be read from the ledger "
                f"({exc}), so they cannot be checked. Do the work yourself and tell the user; the operator must fix "
                "the ledger as its error says, or remove the caps (offload config set delegation.max_... null)")
    return _scope_refusal(cfg, session, day, store.today())


def _scope_refusal(cfg: Any, session: Spend, day: Spend, today: str) -> str | None:
    for scope, spent, whose, when in (("session", session, "this session's subagents have", ""),
                                      ("day", day, "subagents have", f" today (UTC {today})")):
        refusal = _over(cfg, scope, spent, whose, when)
        if refusal:
            return refusal
    return None


def _over(cfg: Any, scope: str, spent: Spend, whose: str, when: str) -> str | None:
    tokens_key, cost_key = f"max_tokens_per_{scope}", f"max_cost_usd_per_{scope}"
    tokens_cap, cost_cap = getattr(cfg, tokens_key), getattr(cfg, cost_key)
    after = ("Do the rest of the work yourself and tell the user; "
             + ("the budget renews at 00:00 UTC, and " if scope == "day" else "")
             + "the operator can raise it (offload config set delegation.{key} N)"
             + (" or start a new session" if scope == "session" else ""))
    if tokens_cap is not None and spent.tokens >= tokens_cap:
        return (f"not dispatched: {whose} used {spent.tokens} tokens{when}, the budget delegation.{tokens_key}="
                f"{tokens_cap}. " + after.format(key=tokens_key))
    if cost_cap is not None and spent.cost_unknown_calls:
        return (f"not dispatched: {whose} made {spent.cost_unknown_calls} model call(s){when} whose cost the provider did "
                f"not report, so their spend cannot be checked against delegation.{cost_key}={usd(cost_cap)} (an "
                "unknown cost is never taken as 0). Do the rest of the work yourself and tell the user; the operator "
                "must use a provider that reports cost or remove the cap "
                f"(offload config set delegation.{cost_key} null)")
    if cost_cap is not None and spent.cost_usd >= cost_cap:
        return (f"not dispatched: {whose} spent {usd(spent.cost_usd)}{when}, the budget delegation.{cost_key}="
                f"{usd(cost_cap)}. " + after.format(key=cost_key))
    return None

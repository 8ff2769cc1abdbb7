"""What every descendant of one top-level ``delegate_task`` call shares: the ROOT session its
spend is booked to, the spawn depth, the count of its agents running now, and the budget of
the delegation that built it.

A subagent that delegates again (an orchestrator) used to start afresh: its calls charged its
own ``sess_…-sub0-…`` session (a new one, so the session cap never bit: 198,789 tokens were
booked against a 5,000-token cap), its grandchildren's spend never reached the root
delegation's cap, a child built without an ``AIAgent`` depth counter (another runtime's) could
delegate forever, and nested inline calls each ran up to ``max_concurrent_children`` more
agents. Now the call that builds a child hands it a ``Lineage`` (``children`` sets it as
``delegation_lineage``), and a call made by that child (``tool``) inherits it whole:

- spend is booked to the root session (the session and day caps hold for every level) and
  charged up the chain of delegation budgets (``DelegationBudget.parent``): a grandchild stops
  when its own call's budget or any ancestor's is used up;
- ``depth`` counts every level, whatever built the child;
- ``live`` counts the tree's running agents: a nested call that would take it past
  ``delegation.max_concurrent_children`` is refused with that key's name.

A lineage crosses a process boundary as JSON: in a queued unit's spec (``to_spec``) for an
``offload worker``, and in ``LINEAGE_ENV`` for a command a subagent runs, so an
``offload run`` started by a child's ``run_command`` joins its parent's tree instead of
starting a new root (the sandbox hides offload's home from such a command as well; this is
the budget's own rule, not the boundary).

Invariant: a lineage is never reset by a descendant: the session, the depth and the budgets
only ever come from the call above.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from offload.subagents.budget import DelegationBudget, SpendStore, budget_from_spec
from offload.toolsets.toolset_names import LINEAGE_ENV, LINEAGE_SETTING



class LiveCount:
    """Agents of one delegation tree running now, at most ``cap``. Thread-safe."""

    def __init__(self, cap: int, running: int = 0) -> None:
        self.cap, self.running = cap, running
        self._lock = threading.Lock()

    def reserve(self, count: int) -> bool:
        """Take ``count`` places, or none (False) when that would pass the cap."""
        with self._lock:
            if self.running + count > self.cap:
                return False
            self.running += count
            return True

    def release(self, count: int = 1) -> None:
        with self._lock:
            self.running = max(0, self.running - count)


@dataclass(frozen=True)
class Lineage:
    """What the agents one call builds inherit: the root ``session_key`` their calls charge,
    their own spawn ``depth``, the tree's ``live`` count and the ``budget`` they charge."""

    session_key: str
    depth: int
    live: LiveCount
    budget: DelegationBudget | None = None

    def to_spec(self) -> dict[str, Any]:
        """JSON of this lineage for another process (a worker; a command's ``offload run``)."""
        spec: dict[str, Any] = {"session_key": self.session_key, "depth": self.depth}
        if self.budget is not None:
            spec["budget"] = self.budget.to_spec()
        return spec

    def env_value(self) -> str:
        return json.dumps(self.to_spec(), separators=(",", ":"))


def adopt(agent: Any, lineage: Lineage) -> None:
    """Make ``agent`` a member of ``lineage``'s tree: its delegate_task calls inherit it, and its
    commands pass it on (the terminal tool sets ``LINEAGE_ENV`` from the setting)."""
    agent.delegation_lineage = lineage
    settings = getattr(agent, "tool_settings", None)
    if isinstance(settings, dict):
        settings[LINEAGE_SETTING] = lineage.env_value()


def of_agent(agent: Any) -> Lineage | None:
    """The lineage the call that built ``agent`` gave it, or None: a top-level agent."""
    lineage = getattr(agent, "delegation_lineage", None)
    return lineage if isinstance(lineage, Lineage) else None


def from_spec(spec: Any, store: SpendStore | None, cap: int, running: int = 0) -> Lineage | None:
    """A lineage rebuilt in another process from ``Lineage.to_spec``; its budget shares the
    call's total through ``store``; its live count starts here (``running``)."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("session_key"), str):
        return None
    depth = spec.get("depth")
    depth = depth if isinstance(depth, int) and not isinstance(depth, bool) and depth > 0 else 1
    return Lineage(spec["session_key"], depth, LiveCount(cap, running), budget_from_spec(spec.get("budget"), store))


def from_env(environ: Mapping[str, str], store: SpendStore | None, cap: int) -> Lineage | None:
    """The lineage a subagent's command passed to this process (``LINEAGE_ENV``), or None."""
    raw = environ.get(LINEAGE_ENV, "")
    if not raw:
        return None
    try:
        spec = json.loads(raw)
    except ValueError:
        return None
    return from_spec(spec, store, cap)

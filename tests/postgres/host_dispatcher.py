"""A dispatching "host" of the multi-host tests (run as a script; the test SIGKILLs it): it
calls ``delegate_task`` with ``delegation.run_on: workers``, so its background call becomes a
queued unit in the shared ledger, prints ``Q <delegation id>`` (flushed) and waits. Arguments:
the session id its results belong to, then the goals."""
from __future__ import annotations

import json
import sys
import threading


def main(session_id: str, goals: list[str]) -> None:
    import tools.delegate_tool as dt
    from offload.context.approval import set_current_session_key
    from tests.delegate.fakes import FakeParent

    dt._load_config = lambda: {"run_on": "workers"}
    set_current_session_key(session_id)
    parent = FakeParent(session_id=session_id)
    parent.model = "demo-model"  # the workers' model server serves this one
    out = json.loads(dt.delegate_task(tasks=[{"goal": g} for g in goals], background=True, parent_agent=parent))
    assert out.get("run_on") == "workers", out
    sys.stdout.write(f"Q {out['delegation_id']}\n")
    sys.stdout.flush()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

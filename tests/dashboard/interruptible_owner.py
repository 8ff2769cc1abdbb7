"""Another offload process for the dashboard's interrupt test, driven through the public API
only: it delegates one task whose subagent's model never answers (``offload.testing``'s
scripted server with a hanging reply), prints READY <id>, honours control requests in the
ledger (its ``Offload``'s owner loop, as in every offload command), and exits 0 once the
unit's result came back interrupted (it leaves the result unacknowledged).

Usage: python interruptible_owner.py   (HERMES_HOME from the environment)
"""
from __future__ import annotations

from offload import Offload
from offload.testing import DEMO_MODEL, ScriptedModelServer, hang_reply


def main() -> int:
    with ScriptedModelServer(lambda request: hang_reply("waiting for the interrupt…")) as model, \
            Offload(model=DEMO_MODEL, base_url=model.url) as off:
        handle = off.delegate("Wait for the interrupt from the dashboard.", session="sess-other")
        print("READY", handle.id, flush=True)
        [result] = off.results("sess-other", timeout_s=60)
        return 0 if result.document()["children"][0]["state"] == "interrupted" else 1


if __name__ == "__main__":
    raise SystemExit(main())

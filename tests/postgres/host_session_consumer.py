"""A chat-like consumer "host" of ONE session, for the random-fault tests (run as a script).

It consumes as ``offload chat`` does: replay once (which starts the LISTEN/NOTIFY listener),
then drain the completion bus for its session, claim each result, "show" it, "store the turn"
(append the id to ``$HERMES_HOME/turns``, fsynced: this host's session store), and only then
complete the claim. A result whose id this host already stored is only acknowledged (the turn
was stored before a crash; only the acknowledgement was lost). Arguments: ``SESSION PAUSE_S``:
the pause between showing and storing, the window a test kills it or restarts the server in.
Lines, flushed:

    LISTENING            the replay ran and the listener is in place
    SHOW <id> <status>   claimed and shown
    STORE <id>           the turn is stored
    ACK <id>             the claim was completed (or the row acknowledged)
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def stored_ids(path: Path) -> set[str]:
    return set(path.read_text().split()) if path.exists() else set()


def store(path: Path, delegation_id: str) -> None:
    with open(path, "a") as turns:
        turns.write(delegation_id + "\n")
        turns.flush()
        os.fsync(turns.fileno())


def acknowledge(delivery, evt: dict, claim: str) -> None:
    if not delivery.complete_event_delivery(evt, claim):
        delivery.mark_completion_delivered(evt["delegation_id"])  # the lease ran out; the stored turn counts
    say(f"ACK {evt['delegation_id']}")


def main(session: str, pause_s: float) -> None:
    from tools import async_delegation_delivery as delivery
    from tools.process_registry import process_registry

    turns = Path(os.environ["HERMES_HOME"]) / "turns"
    process_registry.restore_completions()
    say("LISTENING")
    while True:
        for evt, _text in process_registry.drain_notifications(session_key=session):
            claim = delivery.claim_event_delivery(evt, "session-consumer")
            if not claim:
                continue  # another consumer holds it: it delivers it, or its claim is released later
            did = evt["delegation_id"]
            if did in stored_ids(turns):
                acknowledge(delivery, evt, claim)
                continue
            say(f"SHOW {did} {evt.get('status')}")
            time.sleep(pause_s)
            store(turns, did)
            say(f"STORE {did}")
            acknowledge(delivery, evt, claim)
        time.sleep(0.05)  # the chat polls its inbox about this often while idle


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))

"""One consumer "host" of the cross-host delivery tests (run as a script).

A gateway-like consumer on the PostgreSQL ledger: it replays once (which starts the
LISTEN/NOTIFY listener), then drains the completion bus as results arrive, claims each,
"delivers" it by printing, and completes the claim. An event another consumer holds is put
back and retried when the bus is idle, as the gateway retries it on its next tick. Arguments: ``MODE CLAIM_LEASE_S SWEEP_S
[TICK_S]`` (TICK_S: how long an idle wait lasts before the next look, default SWEEP_S); with MODE
``die-after-claim`` it claims one result and then hangs without completing it (the test kills
it: a consumer that died mid-delivery). Lines, flushed:

    LISTENING                 the replay ran and the listener is in place
    C <delegation id>         claimed
    D <delegation id>         delivered (claim completed)
"""
from __future__ import annotations

import queue
import sys
import threading


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(mode: str, claim_lease_s: float, sweep_s: float, tick_s: float) -> None:
    from dataclasses import replace

    from offload import Offload
    from offload.engine.policy import DEFAULTS

    off = Offload(policy=replace(DEFAULTS, claim_lease_s=claim_lease_s, orphan_sweep_interval_s=sweep_s))
    process_registry, delivery = off.bus, off.deliveries
    process_registry.restore_completions()
    say("LISTENING")
    bus = process_registry.completion_queue
    held: list[dict] = []  # claimed by another consumer: retried whenever the bus is idle
    while True:
        try:
            bus.put(bus.get(timeout=tick_s))  # wake on an event; the drain below takes it
        except queue.Empty:
            for evt in held:
                bus.put(evt)
            held.clear()
        for evt, _text in process_registry.drain_notifications(owns_event=lambda e: True):
            claim = delivery.claim_event(evt, f"consumer-{mode}")
            if claim is None:
                row = delivery.get(evt["delegation_id"])
                if row is not None and row["delivery_state"] == "pending":
                    held.append(evt)
                continue
            say(f"C {evt['delegation_id']}")
            if mode == "die-after-claim":
                threading.Event().wait()
            if not delivery.complete_event(evt, claim):
                raise SystemExit(f"lost the claim on {evt['delegation_id']} while delivering it")
            say(f"D {evt['delegation_id']}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4] if len(sys.argv) > 4 else sys.argv[3]))

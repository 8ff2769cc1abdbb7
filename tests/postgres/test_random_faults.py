"""Random faults across hosts, drawn at random times (issue 27): every result is delivered
exactly once after acknowledgement, no fenced write leaks, and each within 10 s of its fault's
end -- with the default claim lease (300 s), so no fault may wait for it.

The fleet, all real processes on one private PostgreSQL server (so restarting it disturbs no
other test): ``offload worker`` on host-b and host-c, and a chat-like consumer of the session on
host-a and host-b (``host_session_consumer.py``: claim, show, store the turn, acknowledge).
Host-b's consumer shares its host with a worker -- the case where a live owner on the
consumer's host never delivers. Each trial queues one worker unit and injects one fault:

- ``dispatcher_killed``: host-a's dispatching process (``delegate_task`` with ``run_on:
  workers``) is SIGKILLed 0-1.5 s after it queued the unit; nothing on host-a is restarted for
  it. Fault end: the kill.
- ``consumer_killed``: the consumer that showed the result is SIGKILLed between showing it and
  storing its turn, then restarted on its host. Fault end: the kill.
- ``server_restarted``: PostgreSQL is stopped while a consumer holds the claim (between show and
  store) and started 0.5-3 s later. Fault end: the server is back.
- ``worker_killed``: the worker running the unit is SIGKILLed mid-child, then restarted; the
  other worker recovers the unit once the dead one's lease (3 s here) has run out. Fault end:
  the lease's end.
- ``worker_paused``: the worker running the unit is SIGSTOPped mid-child past its lease, then
  resumed: its late writes must be refused (fenced) and the recovery stand. Fault end: the
  lease's end.

Counted: lost (never delivered), duplicated (shown after the row was seen delivered), fence
violations (a result shown with another outcome than the row ends with), late (delivered more
than 10 s after the fault's end). ``OFFLOAD_CHAOS_LONG=1`` runs 200 trials (40 per kind; about
15 minutes on 2 cores), else 5 (one per kind); ``OFFLOAD_FAULT_TRIALS=N`` overrides.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.chaos.support import LONG, base_seed, report
from tests.postgres.conftest import LEASE_S, Host
from tests.postgres.server_control import ROOT, ServerControl

KINDS = ("dispatcher_killed", "consumer_killed", "server_restarted", "worker_killed", "worker_paused")
TRIALS = int(os.environ.get("OFFLOAD_FAULT_TRIALS") or (200 if LONG else len(KINDS)))
WITHIN_S = 10.0
SESSION = "sess_random_faults"
SHOW_PAUSE_S = 0.6  # a consumer's window between showing a result and storing its turn
CHILD_S = 1.5  # how long a subagent takes: the window to kill or pause its worker in
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180 + 45 * TRIALS)]


class Log:
    """Every line of every process, stamped with the wall clock when it arrived."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str, str]] = []
        self.changed = threading.Condition()

    def add(self, who: str, line: str) -> None:
        with self.changed:
            self.lines.append((time.time(), who, line))
            self.changed.notify_all()

    def wait(self, prefix: str, after: float, who: str | None = None, timeout_s: float = 60.0) -> tuple[float, str, str]:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                for entry in self.lines:
                    if entry[0] >= after and entry[2].startswith(prefix) and who in (None, entry[1]):
                        return entry
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    tail = "\n".join(f"{w}: {l}" for _, w, l in self.lines[-40:])
                    raise AssertionError(f"no {prefix!r} line from {who or 'any host'} within {timeout_s}s:\n{tail}")
                self.changed.wait(remaining)


class LoggedHost(Host):
    """A ``Host`` whose every line also goes to the shared ``Log``."""

    def __init__(self, log: Log, name: str, *args, **kwargs) -> None:
        self.log, self.name = log, name
        super().__init__(*args, **kwargs)

    def _read(self) -> None:
        for line in iter(self.proc.stdout.readline, ""):
            self.log.add(self.name, line.rstrip("\n"))
            self._incoming.put(line.rstrip("\n"))
        self._incoming.put(None)


@dataclass
class Fleet:
    base: Path
    url: str
    model_url: str
    log: Log = field(default_factory=Log)
    procs: dict[str, LoggedHost] = field(default_factory=dict)

    def worker(self, host_id: str) -> LoggedHost:
        config = {"model": "demo-model", "base_url": self.model_url}
        return self._start(f"worker@{host_id}", host_id, "", "offload worker on",
                           argv=[sys.executable, "-m", "offload", "worker", "-c", "2"], config=config)

    def consumer(self, host_id: str) -> LoggedHost:
        return self._start(f"consumer@{host_id}", host_id, "host_session_consumer.py", "LISTENING",
                           SESSION, str(SHOW_PAUSE_S))

    def _start(self, name: str, host_id: str, script: str, ready: str, *args: str, **kwargs) -> LoggedHost:
        started = time.time()
        proc = LoggedHost(self.log, name, self.base, host_id, self.url, script, *args, **kwargs)
        self.procs[name] = proc
        self.log.wait(ready, started, name)
        return proc

    def restart(self, name: str) -> None:
        host_id = name.split("@", 1)[1]
        self.procs.pop(name).stop()
        (self.worker if name.startswith("worker@") else self.consumer)(host_id)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()


class PrivateServer:
    """A PostgreSQL cluster of this test alone (``.ci/postgres-up`` in a temporary directory on
    a free port), so stopping it disturbs no other test or helper sharing the test server."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="offload-pg-faults-"))
        self.env = {**os.environ, "OFFLOAD_PG_DIR": str(self.dir)}
        self.env.pop("OFFLOAD_PG_PORT", None)
        done = subprocess.run([str(ROOT / ".ci" / "postgres-up")], env=self.env, capture_output=True, text=True,
                              timeout=180)
        if done.returncode != 0:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise RuntimeError(f".ci/postgres-up could not start a private cluster: {done.stderr[-1500:]}")
        self.dsn = done.stdout.strip().rsplit("=", 1)[1]
        self.control = ServerControl(self.dsn, self.dir)

    def close(self) -> None:
        subprocess.run([str(ROOT / ".ci" / "postgres-up"), "stop"], env=self.env, capture_output=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def private_server():
    from tests.postgres_support import postgres_dsn

    postgres_dsn()  # skips (or fails under CI=true) without the test server, naming the command
    try:
        server = PrivateServer()
    except RuntimeError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield server
    server.close()


class Ledger:
    """The test's own view of the shared ledger: queueing units and watching their rows."""

    def __init__(self, url: str) -> None:
        from offload.ledger.postgres.ledger import PostgresLedger

        self.url = url
        self.ledger = PostgresLedger(url, host_id="host-test")
        self.delivered_at: dict[str, float] = {}  # wall time the row was first seen delivered

    def queue(self, delegation_id: str) -> None:
        import tools.delegate_tool as dt
        from offload.ledger import DispatchRow
        from offload.origin import Origin
        from offload.subagents.config import DelegationConfig
        from offload.subagents.queue import unit_spec

        unit = dt.Batch(tasks=[dt.TaskArgs(goal=f"goal of {delegation_id}")], children=[], parent=None,
                        cfg=DelegationConfig(), creds={"model": "demo-model"}, indexes=[0])
        origin = Origin.capture(SESSION, SESSION)
        row = DispatchRow.of(delegation_id, origin, time.time(), unit_spec(unit, origin))
        assert self.ledger.enqueue_unit(row, time.time())

    def wait_delivered(self, delegation_id: str, timeout_s: float = 60.0) -> float:
        """Poll until the row is delivered; the wall time it was first seen so."""
        import psycopg

        deadline = time.monotonic() + timeout_s
        while delegation_id not in self.delivered_at:
            assert time.monotonic() < deadline, f"{delegation_id} was never delivered"
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
                    state = conn.execute("SELECT delivery_state FROM async_delegations WHERE delegation_id=%s",
                                         (delegation_id,)).fetchone()
            except psycopg.OperationalError:
                state = None  # the server is restarting
            if state and state[0] == "delivered":
                self.delivered_at[delegation_id] = time.time()
            else:
                time.sleep(0.05)
        return self.delivered_at[delegation_id]

    def final_states(self) -> dict[str, tuple[str, str]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return {did: (state, delivery) for did, state, delivery in conn.execute(
                "SELECT delegation_id, state, delivery_state FROM async_delegations")}

    def close(self) -> None:
        self.ledger.close()


def run_trial(kind: str, did: str, fleet: Fleet, ledger: Ledger, server: PrivateServer,
              rng: random.Random) -> tuple[float, str]:
    """Inject one fault of ``kind`` around a unit (``did``, or the one a dispatcher queues);
    returns the fault's end (wall time) and the unit's id."""
    log = fleet.log
    if kind == "dispatcher_killed":
        started = time.time()
        dispatcher = LoggedHost(log, "dispatcher@host-a", fleet.base, "host-a", fleet.url, "host_dispatcher.py",
                                SESSION, f"goal of {did}")
        queued = log.wait("Q ", started, "dispatcher@host-a")[2].split()[1]
        time.sleep(rng.uniform(0.0, 1.5))
        dispatcher.signal(signal.SIGKILL)
        fault_end = time.time()
        dispatcher.stop()
        return fault_end, queued
    queued_at = time.time()
    ledger.queue(did)
    if kind in ("consumer_killed", "server_restarted"):
        _, who, _ = log.wait(f"SHOW {did}", queued_at)
        if kind == "consumer_killed":
            time.sleep(rng.uniform(0.0, SHOW_PAUSE_S * 0.8))
            fleet.procs[who].signal(signal.SIGKILL)
            fault_end = time.time()
            fleet.restart(who)
            return fault_end, did
        server.control.stop()
        time.sleep(rng.uniform(0.5, 3.0))
        server.control.start()
        return time.time(), did
    _, who, _ = log.wait(f"started {did}", queued_at)
    time.sleep(rng.uniform(0.1, CHILD_S * 0.7))
    if kind == "worker_killed":
        fleet.procs[who].signal(signal.SIGKILL)
        fault_end = time.time() + LEASE_S
        fleet.restart(who)
        return fault_end, did
    fleet.procs[who].signal(signal.SIGSTOP)
    paused_at = time.time()
    time.sleep(LEASE_S + 3.0)  # past its lease: another worker recovers the unit meanwhile
    fleet.procs[who].signal(signal.SIGCONT)
    return paused_at + LEASE_S, did


def shown(log: Log) -> list[tuple[float, str, str]]:
    """(wall time, id, status) of every SHOW line."""
    return [(t, line.split()[1], line.split()[2]) for t, _, line in list(log.lines) if line.startswith("SHOW ")]


def test_random_faults_across_hosts_lose_nothing_duplicate_nothing_and_deliver_within_10s(
        private_server, tmp_path, model_server):
    import psycopg

    from offload.testing.model_server import text_reply

    seed = base_seed()
    rng = random.Random(seed)
    server = model_server(lambda request: (time.sleep(CHILD_S), text_reply("the worker's answer"))[1])
    schema = f"t_faults_{os.getpid()}"
    with psycopg.connect(private_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{private_server.dsn}?options=-csearch_path%3D{schema}"
    fleet, ledger = Fleet(tmp_path, url, server.url), Ledger(url)
    plan = [KINDS[i % len(KINDS)] for i in range(TRIALS)]
    rng.shuffle(plan)
    trials: list[tuple[str, str, float]] = []  # (kind, unit id, fault end)
    try:
        for host_id in ("host-b", "host-c"):
            fleet.worker(host_id)
        for host_id in ("host-a", "host-b"):
            fleet.consumer(host_id)
        for n, kind in enumerate(plan):
            fault_end, did = run_trial(kind, f"deleg_fault{n:04d}", fleet, ledger, private_server, rng)
            ledger.wait_delivered(did, timeout_s=WITHIN_S + 50)
            trials.append((kind, did, fault_end))
        time.sleep(1.0)  # a late duplicate or a leaked write would show up now
        finals = ledger.final_states()
    finally:
        fleet.stop()
        ledger.close()
    counts = tally(trials, ledger.delivered_at, shown(fleet.log), finals)
    counts.update(seed=seed, trials=len(trials))
    report("random faults across hosts", **counts)
    print(json.dumps(counts, indent=2))
    (tmp_path / "fault-counts.json").write_text(json.dumps(counts, indent=2))
    assert counts["lost"] == counts["duplicated_after_ack"] == counts["fence_violations"] == counts["late"] == 0, \
        f"seed {seed} (OFFLOAD_CHAOS_SEED={seed} replays it): {counts}"


def tally(trials: list[tuple[str, str, float]], delivered_at: dict[str, float],
          shows: list[tuple[float, str, str]], finals: dict[str, tuple[str, str]]) -> dict:
    latency = {did: delivered_at[did] - end for _, did, end in trials if did in delivered_at}
    per_kind = Counter(kind for kind, _, _ in trials)
    statuses = Counter(finals[did][0] for _, did, _ in trials if did in finals)
    return {
        "per_kind": dict(per_kind),
        "final_states": dict(statuses),
        "lost": sum(1 for _, did, _ in trials if finals.get(did, ("", ""))[1] != "delivered"),
        "duplicated_after_ack": sum(1 for t, did, _ in shows if did in delivered_at and t > delivered_at[did]),
        "fence_violations": sum(1 for _, did, status in shows if did in finals and status != finals[did][0]),
        "late": sum(1 for s in latency.values() if s > WITHIN_S),
        "shown_again_before_ack": sum(Counter(did for _, did, _ in shows).values()) - len(set(d for _, d, _ in shows)),
        "max_latency_s": round(max(latency.values(), default=0.0), 2),
        "max_latency_s_per_kind": {k: round(max((latency[d] for kk, d, _ in trials if kk == k and d in latency),
                                                default=0.0), 2) for k in per_kind},
    }

"""Kill fuzzing: an owner process dispatching fan-outs is SIGKILLed at a random moment and a
fresh interpreter restores its ledger.

Per trial (``kill_owner.py`` documents the manifest the owner keeps):
- every unit certainly dispatched is reported exactly once by the restore, and nothing that
  was never dispatched is reported;
- a unit whose completion event had been queued (so persisted) keeps its real result; any
  unit reported with a real status carries exactly the real results; a unit reported
  ``unknown`` keeps the real result of every child recorded durably before the kill;
- after every reported unit is acknowledged, a second restore yields nothing.

A second test kills the owner inside a batched commit (group commit: one transaction holding
several threads' writes), right before or right after its COMMIT, with the same invariants: a
batch killed before COMMIT loses only writes none of whose callers had returned.

On PostgreSQL (``OFFLOAD_TEST_LEDGER=postgresql``) each owner runs as one of several host ids
and the restorer as another, with a 1 s lease: recovery goes through lease expiry and the
fencing of the dead owner's token, not the same-host pid check.

CI runs 30 trials (12 batched), ``OFFLOAD_CHAOS_LONG=1`` runs 500 (100 batched);
``OFFLOAD_CHAOS_TRIALS`` overrides both. Whether owners' writes form batches depends on their
plans and on timing, so a batched round in which fewer than a sixth of the owners died inside
one is followed by another on the next seeds (at most three rounds).
A failure names the trial seed: ``OFFLOAD_CHAOS_SEED=<seed> OFFLOAD_CHAOS_TRIALS=1`` replays it.
"""
from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.chaos.support import LONG, base_seed, report, scaled
from tests.postgres_support import host_env_for, ledger_env_for
from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from offload.engine.states import result_state

TRIALS = int(os.environ.get("OFFLOAD_CHAOS_TRIALS") or scaled(30, 500))
BATCH_TRIALS = int(os.environ.get("OFFLOAD_CHAOS_TRIALS") or scaled(12, 100))
BATCH_ROUNDS = 3  # at most this many rounds of BATCH_TRIALS, until enough owners died inside a batch
PARALLEL = 3  # trials mostly wait on children and timers, so a few overlap well on 2 cores
MAX_KILL_DELAY_S = 1.3  # long enough that some owners finish everything before the kill
ROOT = Path(__file__).resolve().parents[2]
OWNER = Path(__file__).with_name("kill_owner.py")
RESTORE = Path(__file__).with_name("kill_restore.py")

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(300, 3600))]


@dataclass
class Manifest:
    ready: bool = False
    done: bool = False
    maybe: set[str] = field(default_factory=set)
    certain: set[str] = field(default_factory=set)
    recorded: dict[str, set[int]] = field(default_factory=dict)
    finished: dict[str, str] = field(default_factory=dict)
    noticed: Counter = field(default_factory=Counter)  # interim failure notices queued, per unit
    calls_begun: set[str] = field(default_factory=set)
    calls_returned: set[str] = field(default_factory=set)
    killed_in_batch: int = 0  # writes in the batched commit the owner died in (0: not killed there)

    @classmethod
    def read(cls, path: Path) -> "Manifest":
        m = cls()
        text = path.read_text() if path.exists() else ""
        for line in text.splitlines():
            tag, _, rest = line.partition(" ")
            if tag == "READY":
                m.ready = True
            elif tag == "DONE":
                m.done = True
            elif tag == "K":
                m.killed_in_batch = int(rest)
            elif tag == "B":
                call, ids = rest.split(" ", 1)
                m.calls_begun.add(call)
                m.maybe.update(json.loads(ids))
            elif tag == "A":
                call, ids = rest.split(" ", 1)
                m.calls_returned.add(call)
                m.certain.update(json.loads(ids))
            elif tag == "R":
                unit, idx = rest.split()
                m.recorded.setdefault(unit, set()).add(int(idx))
            elif tag == "E":
                unit, status = rest.split()
                m.finished[unit] = status
            elif tag == "N":  # an interim notice is not the unit's result: the unit still runs
                m.noticed[rest.split()[0]] += 1
        return m


@dataclass
class Trial:
    seed: int
    home: Path
    delay_s: float = 0.0
    kill_at: int = 0  # >0: the owner kills itself at its N-th ledger write (see kill_owner.py)
    when: str = "before"
    manifest: Manifest | None = None
    restored: dict | None = None
    problems: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)


OWNER_HOSTS = 3  # on PostgreSQL, owners run as one of several hosts and the restorer as another


def _env(home: Path, host_id: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1",
            **ledger_env_for(home), **host_env_for(home, host_id)}


def _run_owner_and_kill(trial: Trial) -> None:
    manifest = trial.home.parent / "manifest"
    stderr = trial.home.parent / "owner.stderr"
    with open(stderr, "wb") as err:
        argv = [sys.executable, str(OWNER), str(manifest), str(trial.seed), str(trial.kill_at), trial.when]
        env = _env(trial.home, f"owner-host-{trial.seed % OWNER_HOSTS}")
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=str(ROOT))
    try:
        deadline = time.monotonic() + 60
        while not Manifest.read(manifest).ready:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"owner of trial {trial.seed} never got ready: {stderr.read_text()[-2000:]}")
            time.sleep(0.005)
        try:
            proc.wait(timeout=trial.delay_s)  # a self-killing owner may die first
        except subprocess.TimeoutExpired:
            pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    if proc.returncode != -signal.SIGKILL:
        raise AssertionError(f"owner of trial {trial.seed} exited by itself ({proc.returncode}): "
                             f"{stderr.read_text()[-2000:]}")
    trial.manifest = Manifest.read(manifest)


def _restore(trial: Trial) -> None:
    via = ["registry"] if trial.seed % 2 else []  # half through the lazy facade consumers use
    out = subprocess.run([sys.executable, str(RESTORE), *via], env=_env(trial.home, "restore-host"),
                         capture_output=True, text=True,
                         cwd=str(ROOT), timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"restore of trial {trial.seed} crashed: {out.stderr[-3000:]}")
    trial.restored = json.loads(out.stdout)


def _run(trial: Trial) -> Trial:
    try:
        _run_owner_and_kill(trial)
        _restore(trial)
        _check(trial)
    except AssertionError as exc:
        trial.problems.append(str(exc))
    return trial


# -- the invariants -----------------------------------------------------------------------------
def _expected_child(goal: str) -> tuple[str, str, str | None]:
    """(status, field, value) of a child's real result entry, from its goal."""
    outcome = goal.split(":")[1]
    if outcome == "ok":
        return "completed", "summary", f"real:{goal}"
    if outcome == "fail":
        return "failed", "error", f"boom:{goal}"
    return "error", "error", f"RuntimeError: crash:{goal}"  # raised, not ran-and-failed (#14)


def _is_real_child(entry: dict, goals: list[str]) -> bool:
    idx = entry.get("task_index")
    if not isinstance(idx, int) or not 0 <= idx < len(goals):
        return False
    status, key, value = _expected_child(goals[idx])
    return entry.get("status") == status and entry.get(key) == value


def _check_batch(trial: Trial, evt: dict, did: str) -> None:
    goals = evt.get("goals") or []
    indexes = evt.get("task_indexes") or list(range(len(goals)))
    results = evt.get("results") or []
    by_index = {r.get("task_index"): r for r in results}
    recorded = trial.manifest.recorded.get(did, set())
    if len(by_index) != len(results):
        trial.problems.append(f"{did}: a task index is reported twice: {results}")
    if evt["status"] == "unknown":
        if results and sorted(by_index) != sorted(indexes):
            trial.problems.append(f"{did}: recovered results {sorted(by_index)} do not cover the unit {indexes}")
        for idx in recorded:
            if idx not in by_index or not _is_real_child(by_index[idx], goals):
                trial.problems.append(f"{did}: child {idx} was recorded durably but lost its real result: "
                                      f"{by_index.get(idx)}")
            else:
                trial.counts["recorded_kept"] += 1
        for entry in results:
            if entry.get("status") != "unknown" and not _is_real_child(entry, goals):
                trial.problems.append(f"{did}: recovered child is neither real nor unknown: {entry}")
        trial.counts["children_unknown"] += sum(1 for r in results if r.get("status") == "unknown")
        trial.counts["partial_units"] += int(bool(results))
        return
    if sorted(by_index) != sorted(indexes) or not all(_is_real_child(r, goals) for r in results):
        trial.problems.append(f"{did}: finished unit does not carry exactly its real results: {results}")
    expected = result_state({"results": [{"status": _expected_child(goals[i])[0]} for i in indexes]}, is_batch=True)
    if evt["status"] != expected:
        trial.problems.append(f"{did}: finished with status {evt['status']!r}, expected {expected!r}")
    trial.counts["recorded_kept"] += len(recorded & set(by_index))


def _check_single(trial: Trial, evt: dict, did: str) -> None:
    goal = evt.get("goal") or ""
    if evt["status"] == "unknown":
        if evt.get("summary") is not None:
            trial.problems.append(f"{did}: an unknown single unit claims a summary: {evt.get('summary')!r}")
        return
    outcome = goal.split(":")[1]
    status, key, value = {"ok": ("completed", "summary", f"real:{goal}"), "fail": ("failed", "error", f"boom:{goal}"),
                          "crash": ("error", "error", f"RuntimeError: crash:{goal}")}[outcome]
    if evt["status"] != status or evt.get(key) != value:
        trial.problems.append(f"{did}: finished single unit lost its real result: {evt}")


def _check(trial: Trial) -> None:
    m, restored = trial.manifest, trial.restored
    events = restored["events"]
    ids = [e.get("delegation_id") for e in events]
    trial.counts.update(trials=1, units_dispatched=len(m.certain), children_recorded=sum(map(len, m.recorded.values())),
                        units_reported=len(ids), owner_done=int(m.done),
                        killed_mid_dispatch=int(m.calls_begun != m.calls_returned),
                        killed_at_write=int(bool(trial.kill_at)),
                        killed_in_batch=int(bool(m.killed_in_batch)), batch_writes_at_kill=m.killed_in_batch)
    if restored["count"] != len(events):
        trial.problems.append(f"restore returned {restored['count']} but queued {len(events)} events")
    for did, n in Counter(ids).items():
        if n > 1:
            trial.problems.append(f"{did} was reported {n} times")
    trial.counts["failure_notices"] += sum(m.noticed.values())
    for did, n in m.noticed.items():
        if n > 1:
            trial.problems.append(f"{did} queued {n} interim failure notices (at most one per unit)")
    for did in sorted(m.certain - set(ids)):
        trial.problems.append(f"{did} was dispatched but not reported by the restore")
    for did in sorted(set(ids) - m.maybe):
        trial.problems.append(f"{did} was reported but never dispatched")
    leftover = [r for r in restored["rows"] if r["state"] == "running" or
                (r["delivery_state"] == "pending" and r["delegation_id"] not in ids)]
    if leftover:
        trial.problems.append(f"rows neither settled nor reported after the restore: {leftover}")
    for evt in events:
        did = evt.get("delegation_id")
        if not evt.get("restored"):
            trial.problems.append(f"{did}: a replayed event is not stamped restored")
        if evt.get("task_failure_notice"):
            trial.problems.append(f"{did}: an interim failure notice was stored and replayed as the result")
        finished = m.finished.get(did)
        if finished is not None and evt.get("status") != finished:
            trial.problems.append(f"{did}: its completion was queued as {finished!r} before the kill, "
                                  f"but the restore reports {evt.get('status')!r}")
        trial.counts["unknown" if evt.get("status") == "unknown" else "real_finished"] += 1
        (_check_batch if evt.get("is_batch") else _check_single)(trial, evt, did)


def _acknowledge_and_restore_again(trial: Trial, monkeypatch) -> None:
    """In this process (the owner is dead): ack every reported unit; a second restore is empty."""
    monkeypatch.setenv("HERMES_HOME", str(trial.home))
    for name, value in ledger_env_for(trial.home).items():
        monkeypatch.setenv(name, value)
    try:
        for evt in trial.restored["events"]:
            if not ad.mark_completion_delivered(evt["delegation_id"]):
                trial.problems.append(f"{evt['delegation_id']}: acknowledging it changed nothing")
        again: queue.Queue = queue.Queue()
        if ad.restore_undelivered_completions(again) or not again.empty():
            trial.problems.append(f"a second restore after acknowledgement replayed {again.qsize()} event(s)")
    finally:
        delivery.reset_for_tests()  # close this home's connection before the next trial


def test_sigkilled_owner_loses_nothing_and_duplicates_nothing(tmp_path, monkeypatch):
    seed0 = base_seed()
    trials = []
    for i in range(TRIALS):
        home = tmp_path / f"trial-{i:04d}" / "home"
        home.mkdir(parents=True)
        # The owner's plan and the kill delay both derive from the trial seed alone.
        # Half the timed kills land early, while the owner is still dispatching; a third of
        # the trials kill at a chosen ledger write instead (the timer stays as a backstop).
        kill_rng = random.Random(f"kill:{seed0 + i}")
        trial = Trial(seed=seed0 + i, home=home,
                      delay_s=kill_rng.uniform(0, MAX_KILL_DELAY_S if kill_rng.random() < 0.5 else 0.3))
        if kill_rng.random() < 1 / 3:
            trial.kill_at, trial.when = kill_rng.randint(1, 25), kill_rng.choice(("before", "after"))
            trial.delay_s = MAX_KILL_DELAY_S
        trials.append(trial)
    _run_trials("kill_fuzz", seed0, trials, monkeypatch)


@pytest.mark.sqlite_only  # the batches are SQLite's group commit; the PostgreSQL ledger commits per write
def test_sigkill_inside_a_batched_commit_loses_nothing_and_duplicates_nothing(tmp_path, monkeypatch):
    seed0 = base_seed()  # same owner plans as the first test, killed elsewhere: the replay hint holds
    wanted = max(1, BATCH_TRIALS // 6)
    totals: Counter = Counter()
    # Whether concurrent children's writes form batches depends on the owners' plans (the seed)
    # and on timing: a round whose owners died in too few is followed by one on the next seeds,
    # so the test kills inside batches every time it passes.
    for first in range(0, BATCH_ROUNDS * BATCH_TRIALS, BATCH_TRIALS):
        trials = []
        for i in range(first, first + BATCH_TRIALS):
            home = tmp_path / f"trial-{i:04d}" / "home"
            home.mkdir(parents=True)
            kill_rng = random.Random(f"batch-kill:{seed0 + i}")
            # The timer is only a backstop, for an owner whose writes never formed that many batches.
            trials.append(Trial(seed=seed0 + i, home=home, delay_s=2 * MAX_KILL_DELAY_S,
                                kill_at=kill_rng.randint(1, 3), when=kill_rng.choice(("batch-before", "batch-after"))))
        name = "kill_fuzz_batched" + (f" (round {first // BATCH_TRIALS + 1})" if first else "")
        totals += _run_trials(name, seed0 + first, trials, monkeypatch)
        if totals["killed_in_batch"] >= wanted:
            break
    assert totals["killed_in_batch"] >= wanted, f"too few owners died inside a batched commit: {totals}"


def _run_trials(name: str, seed0: int, trials: list[Trial], monkeypatch) -> Counter:
    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL) as pool:
        done = list(pool.map(_run, trials))
    for trial in done:
        if trial.restored is not None:
            _acknowledge_and_restore_again(trial, monkeypatch)
    totals = sum((t.counts for t in done), Counter())
    report(name, mode="long" if LONG else "bounded", seed=str(seed0), duration_s=round(time.monotonic() - started, 1),
           **{k: totals[k] for k in ("trials", "units_dispatched", "units_reported", "real_finished", "unknown",
                                     "partial_units", "children_recorded", "recorded_kept", "children_unknown",
                                     "killed_mid_dispatch", "killed_at_write", "killed_in_batch",
                                     "batch_writes_at_kill", "owner_done", "failure_notices")})
    failures = [t for t in done if t.problems]
    assert not failures, "\n\n".join(
        f"trial seed {t.seed} (kill after {t.delay_s:.3f}s or at ledger write {t.kill_at} {t.when}; replay: OFFLOAD_CHAOS_SEED={t.seed} "
        f"OFFLOAD_CHAOS_TRIALS=1; thread timing still varies):\n  " + "\n  ".join(t.problems[:10])
        for t in failures[:5])
    return totals

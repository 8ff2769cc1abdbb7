"""``offload.owner.signals``: what runs at SIGTERM/SIGHUP runs off the handler, so a signal landing
while the main thread holds a lock that work needs (the engine's table, the ledger's pool) ends
the process instead of freezing it; then the signal does what it did before. Each case is a
real process signalling itself."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)

PRELUDE = textwrap.dedent("""
    import os, signal, sys, threading, time
    from offload.owner.signals import before_termination
    lock = threading.Lock()
    out = sys.argv[1]
    def note(text):
        with open(out, "a") as f:
            f.write(text + "\\n")
""")


def _run(tmp_path, body: str) -> tuple[int, list[str]]:
    out = tmp_path / "out.txt"
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(out)],
                          capture_output=True, text=True, timeout=45)
    return proc.returncode, out.read_text().splitlines() if out.exists() else []


def test_a_signal_landing_inside_a_lock_the_work_needs_still_runs_the_work_then_ends_the_process(tmp_path):
    code, lines = _run(tmp_path, """
        def work(name):
            with lock:  # in the handler itself this waited forever: the main thread holds it
                note("worked at " + name)
        before_termination(work)
        with lock:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the lock
            note("main still holds the lock")
        threading.Event().wait(30)
        note("never reached")
    """)
    assert code == -signal.SIGTERM
    assert lines == ["main still holds the lock", "worked at SIGTERM"]


def test_the_previous_handler_runs_after_the_work_and_a_repeated_signal_changes_nothing(tmp_path):
    code, lines = _run(tmp_path, """
        def previous(signum, frame):
            note("previous handler")
            sys.exit(3)
        signal.signal(signal.SIGHUP, previous)
        release = threading.Event()
        before_termination(lambda name: (release.wait(20), note("worked at " + name)))
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGHUP)  # again while the work waits: no second run
        note("main goes on")
        release.set()
        threading.Event().wait(30)
    """)
    assert code == 3
    assert lines == ["main goes on", "worked at SIGHUP", "previous handler"]


def test_work_that_never_ends_is_left_after_the_limit(tmp_path):
    code, lines = _run(tmp_path, """
        before_termination(lambda name: threading.Event().wait(), limit_s=0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        note("main goes on")
        threading.Event().wait(30)
    """)
    assert code == -signal.SIGTERM and lines == ["main goes on"]


def test_an_ignored_signal_stays_ignored_and_nothing_is_installed_off_the_main_thread(tmp_path):
    code, lines = _run(tmp_path, """
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        before_termination(lambda name: note("worked"))
        os.kill(os.getpid(), signal.SIGHUP)
        result = []
        t = threading.Thread(target=lambda: result.append(before_termination(lambda name: None)))
        t.start(); t.join()
        note(f"ignored; off the main thread: {result[0]}")
    """)
    assert code == 0 and lines == ["ignored; off the main thread: False"]

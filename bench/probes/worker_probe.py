"""An ``offload worker`` that counts its round trips to PostgreSQL: ``python -m bench.probes.worker_probe
worker -c 4`` runs the CLI as ``python -m offload`` does, with a counter installed first.

What is counted: every exchange of a psycopg connection with its server (``Connection.wait``
on a generator that goes to the socket: a statement — one string of several statements is one
—, a ``BEGIN``/``COMMIT``, the pool's liveness check), except the notification listener's
waits for NOTIFY, which send nothing. Not counted: a wait that never touches the socket (the
pool's ``commit`` of an idle autocommit connection returns at once) and connecting (a pool
connection is opened once and kept). Without pipeline mode each exchange is one round trip.

The count lives in an 8-byte little-endian integer in the file named by
``OFFLOAD_BENCH_COUNT_FILE`` (mapped with ``mmap``), so the benchmark reads it at any moment
without asking the worker anything: ``read_count(path)`` before the first enqueue and after
the last terminal row gives the round trips of the drain.
"""
from __future__ import annotations

import mmap
import os
import sys
import threading
from pathlib import Path

COUNT_FILE_ENV = "OFFLOAD_BENCH_COUNT_FILE"
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def new_count_file(path: Path) -> Path:
    path.write_bytes(bytes(8))
    return path


def read_count(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[:8], "little")


def install(path: Path) -> None:
    """Count every ``Connection.wait`` of this process into ``path`` (see the module doc)."""
    import psycopg

    handle = open(path, "r+b")
    counter = mmap.mmap(handle.fileno(), 8)
    lock = threading.Lock()
    local = threading.local()  # set while a thread waits for notifications
    wait, notifies = psycopg.Connection.wait, psycopg.Connection.notifies

    def count() -> None:
        with lock:
            counter[:8] = (int.from_bytes(counter[:8], "little") + 1).to_bytes(8, "little")

    def counted_at_first_wait(gen):
        """``gen``, counted once if it ever waits on the socket."""
        try:
            state = next(gen)
        except StopIteration as done:
            return done.value
        count()
        while True:
            sent = yield state
            try:
                state = gen.send(sent)
            except StopIteration as done:
                return done.value

    def counted_wait(self, gen, *args, **kwargs):
        if getattr(local, "listening", False):
            return wait(self, gen, *args, **kwargs)
        if getattr(gen, "__qualname__", "").endswith("_execute_gen"):  # a statement always goes to the server
            count()
            return wait(self, gen, *args, **kwargs)
        return wait(self, counted_at_first_wait(gen), *args, **kwargs)

    def uncounted_notifies(self, *args, **kwargs):
        local.listening = True
        try:
            yield from notifies(self, *args, **kwargs)
        finally:
            local.listening = False

    psycopg.Connection.wait = counted_wait
    psycopg.Connection.notifies = uncounted_notifies


def main() -> None:
    install(Path(os.environ[COUNT_FILE_ENV]))
    sys.argv[0] = "offload"
    from offload.cli.app import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()

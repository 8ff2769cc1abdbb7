"""The loopback model server of case 4, in its own process: ``python -m bench.probes.model_server_proc``.

A real model server is another process, so the fan-out measures the parent's side only: the
server's CPU (JSON, SSE writes, 50 handler threads) stays off the parent's GIL and out of
its CPU-per-child figure. Prints the server URL on one line, serves a fixed streamed text
reply to every request, and exits when its stdin closes (the parent went away) or on SIGTERM.
(The scripted server listens with a backlog of 128, as real servers do.)
"""
from __future__ import annotations

import argparse
import sys

CHUNK_CHARS = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20, help="SSE chunks per reply (default 20)")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds between chunks (default 0.1)")
    args = parser.parse_args()
    from offload.testing.model_server import Reply, ScriptedModelServer

    reply = Reply(text="x" * (CHUNK_CHARS * args.chunks), chunk_chars=CHUNK_CHARS, chunk_delay_s=args.delay)
    with ScriptedModelServer(lambda request: reply, model_ids=None) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # returns when the parent closes the pipe or exits


if __name__ == "__main__":
    main()

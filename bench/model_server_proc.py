"""The loopback model server of case 4, in its own process: ``python -m bench.model_server_proc``.

A real model server is another process, so the fan-out measures the parent's side only: the
server's CPU (JSON, SSE writes, 50 handler threads) stays off the parent's GIL and out of
its CPU-per-child figure. Prints the server URL on one line, serves a fixed streamed text
reply to every request, and exits when its stdin closes (the parent went away) or on SIGTERM.
Listens with a backlog of 128, as real servers do, instead of socketserver's 5.
"""
from __future__ import annotations

import argparse
import sys

CHUNK_CHARS = 8
LISTEN_BACKLOG = 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20, help="SSE chunks per reply (default 20)")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds between chunks (default 0.1)")
    args = parser.parse_args()
    from offload import model_server
    from offload.model_server import Reply, ScriptedModelServer

    # socketserver listens with a backlog of 5: a burst of 50 children connecting at once
    # overflows it, and the dropped connections come back only after TCP and LLM-client
    # retries (seconds). A real model server listens with a backlog in the hundreds.
    model_server._HTTPServer.request_queue_size = LISTEN_BACKLOG
    reply = Reply(text="x" * (CHUNK_CHARS * args.chunks), chunk_chars=CHUNK_CHARS, chunk_delay_s=args.delay)
    with ScriptedModelServer(lambda request: reply, model_ids=None) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # returns when the parent closes the pipe or exits


if __name__ == "__main__":
    main()

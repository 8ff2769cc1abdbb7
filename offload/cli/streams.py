"""Where the CLI's output goes when a script reads it: a reader that leaves, and stdout vs stderr.

- ``ReaderTolerant`` wraps stdout and stderr for every command (``tolerate_leaving_readers``):
  once the reader has gone (``offload run … | head -1``), writes are dropped quietly instead of
  raising ``BrokenPipeError`` in the middle of the work (click would exit 1) — ``run`` still
  delivers and stores its background results, and every command exits with its own code. The
  file descriptor is pointed at /dev/null, so the interpreter's last flush is quiet too.
- ``same_destination`` tells whether stdout and stderr end in one place (a terminal, ``2>&1``):
  then ``offload run`` keeps its answers labelled, since the reader sees one transcript.
"""
from __future__ import annotations

import os
import sys
from typing import Any, TextIO


class ReaderTolerant:
    """A text stream whose writes stop, without an error, once the reading end is closed."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._reader_left()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_left()

    def _reader_left(self) -> None:
        self.reader_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, … as the stream has them
        return getattr(self._stream, name)


def tolerate_leaving_readers() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (once) so a closed pipe ends no command."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, ReaderTolerant):
            setattr(sys, name, ReaderTolerant(stream))


def same_destination(first: TextIO = sys.stdout, second: TextIO = sys.stderr) -> bool:
    """Whether both streams write to the same file, pipe or terminal."""
    try:
        a, b = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

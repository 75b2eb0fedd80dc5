"""The console a run writes to, which can never cost a result (:class:`ConsoleStream`, put in front by
:func:`guard_console` for the length of a command: :func:`~gpt2_posheads.cli.args.main_entry`)."""

from __future__ import annotations

import os
import sys


class ConsoleStream:
    """``sys.stdout`` or ``sys.stderr`` as a run writes to them: the console can never end a run.

    A reader that stops early (``script | head -2``: ``BrokenPipeError``), a closed or failing console (any
    ``OSError``) sends the rest of the run's output to ``/dev/null`` and the run goes on to write its results; a
    character the console's encoding cannot show (``PYTHONIOENCODING=ascii``, a Latin-1 terminal) is replaced by the
    encoding's replacement character instead of raising ``UnicodeEncodeError``. Everything else is the stream's own.
    """

    def __init__(self, stream):
        self.stream = stream
        self.gone = False  # the console went away: what is written from here on is dropped

    def write(self, text: str) -> int:
        if self.gone:
            return len(text)
        try:
            return self.stream.write(text)
        except UnicodeEncodeError:
            enc = getattr(self.stream, "encoding", None) or "ascii"
            return self.write(text.encode(enc, "replace").decode(enc, "replace"))
        except (OSError, ValueError):  # a broken pipe, a full disk under a redirect, a closed file
            self._went_away()
            return len(text)

    def flush(self) -> None:
        if self.gone:
            return
        try:
            self.stream.flush()
        except (OSError, ValueError):
            self._went_away()

    def _went_away(self) -> None:
        """Point the stream's file descriptor at ``/dev/null``, so that what its buffer still holds, and the
        interpreter's flush at exit, go nowhere instead of raising again."""
        self.gone = True
        try:
            fd = self.stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)
            self.stream.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name):
        return getattr(self.stream, name)


def guard_console():
    """Put :class:`ConsoleStream` in front of ``sys.stdout`` and ``sys.stderr``; returns the function that flushes them
    and puts the originals back."""
    saved = sys.stdout, sys.stderr
    guards = [ConsoleStream(s) if s is not None and not isinstance(s, ConsoleStream) else s for s in saved]
    sys.stdout, sys.stderr = guards

    def restore() -> None:
        for g in guards:
            if isinstance(g, ConsoleStream):
                g.flush()
        sys.stdout, sys.stderr = saved

    return restore

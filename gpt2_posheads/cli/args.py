"""Options every script shares, their number checks, the console, and the entry that turns a mistake into one line.

A script's life: parse → :func:`~gpt2_posheads.cli.checks.precheck` (all that needs no model) → open the output
folder → load → check what needs the model → measure → judge → write. A user's mistake at any step is one line
``error: <parameter>: <what is wrong>; <allowed>; <hint>`` and exit status 2 (:func:`main_entry`); an input that must
be adjusted is adjusted and said (``note``); internal errors keep their traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence

from ..claims.catalogue import Option
from ..model.validation import INT64, NonFiniteError, NothingMeasuredError, UsageError
from .output import abort_open_outputs, finish_not_testable, write_failure

PROMPT_SOURCES = ("auto", "openwebtext", "wikitext")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's example blocks as written; adds each default once (unless the help names it)."""

    def _get_help_string(self, action):
        h, d = action.help or "", action.default
        said = (
            "default" in h.lower() or not action.option_strings or any(d is x for x in (None, False, argparse.SUPPRESS))
        )
        return h if said else h + " (default: %(default)s)"


SEED_RANGE = (0, (1 << 32) - 1)  # what every random generator here takes as a seed (NumPy's is the narrowest)
_SEEN = "_options_given"  # namespace attribute that records the options given while parsing (removed after)


def _seed(text: str) -> int:
    """A seed (an argparse ``type`` named ``int``): an integer within :data:`SEED_RANGE`. Other integers keep ``int``;
    their own range is checked after parsing, so one past int64 is refused naming that range (``--every``:
    ``allowed 2..9223372036854775807``)."""
    v = int(text)  # ValueError: argparse says "invalid int value: 'abc'"
    if not SEED_RANGE[0] <= v <= SEED_RANGE[1]:
        raise argparse.ArgumentTypeError(f"{v} is out of range; allowed {SEED_RANGE[0]}..{SEED_RANGE[1]}")
    return v


_seed.__name__ = "int"


def _checked(base: type, repeats: bool = False) -> type:
    """argparse's ``base`` action refusing an empty value (unless it means something: the default is empty,
    ``--models``, or the help says what ``''`` does) and, unless it ``repeats`` (``--prompt``), a second value
    (``--seq-len 64 --seq-len 128``) instead of one silently winning."""

    class Checked(base):
        def __call__(self, parser, namespace, values, option_string=None):
            empty_ok = self.default == "" or "''" in (self.help or "")
            if isinstance(values, str) and not values.strip() and not empty_ok:
                empty = f"the value is empty ({values!r}); a non-empty value; leave the option out to use its default"
                raise argparse.ArgumentError(self, empty)
            seen = namespace.__dict__.setdefault(_SEEN, {})
            if self.dest in seen and self.option_strings and not repeats:
                raise argparse.ArgumentError(self, f"given twice ({seen[self.dest]!r}, then {values!r}); give it once")
            seen[self.dest] = values
            super().__call__(parser, namespace, values, option_string)

    return Checked


_StoreOnce, _AppendNonEmpty = _checked(argparse._StoreAction), _checked(argparse._AppendAction, repeats=True)


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are one ``error: ...`` line, refusing an option given twice, an empty value
    (:func:`_checked`), an integer outside what torch takes (a seed: 0..2**32-1)."""

    def __init__(self, *a, **kw):
        kw.setdefault("formatter_class", _Formatter)
        super().__init__(*a, **kw)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self.register("action", "append", _AppendNonEmpty)

    def add_argument(self, *args, **kwargs):
        if kwargs.get("type") is int and "--seed" in args:  # a seed: an integer within SEED_RANGE
            kwargs["type"] = _seed
        return super().add_argument(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        ns.__dict__.pop(_SEEN, None)
        return ns, extras

    def error(self, message: str):  # noqa: D401 - argparse API
        message = re.sub(r"^argument (\S+?)(/\S+)?: ", r"\1: ", message)
        print(f"error: {message}; see --help", file=sys.stderr)
        raise SystemExit(2)


SHIPPED_BY_NAME = "a shipped model by name (mini-gpt2, route-gpt2, lookalike-wpos, ...: offline)"
MODEL_OPTIONS = (
    Option("--model", "gpt2", f"Hugging Face hub name of the model, or {SHIPPED_BY_NAME}"),
    Option("--model-dir", None, "local Hugging Face-format model directory (overrides --model)"),
    DEVICE := Option("--device", None, "torch device: cpu, cuda, cuda:N (default: cuda if available)"),
)
NO_PNG = Option("--no-png", False, "write HTML figures only (skip kaleido/Chromium)")


def output_options(out_help: str | None = None, seed_help: str = "random seed") -> tuple[Option, ...]:
    """The options of every command that writes a results folder (``out_help``: ``--out`` when it is not one)."""
    refused = "a folder holding files this toolkit did not write is refused unless --force"
    return (
        Option("--out", None, out_help or f"output folder (default: results/<script>/<model>); {refused}"),
        Option("--force", False, "write into an --out folder that holds other files (they are kept; none is replaced)"),
        Option("--seed", 0, seed_help, int),
        NO_PNG,
    )


CAPPED = "a value above the model's context is capped at it, and said"


def prompt_options(n_prompts: int = 16, seq_len: int = 256) -> tuple[Option, ...]:
    """The natural-text prompts' options at a command's defaults."""
    return (
        Option("--prompts", "auto", "auto | openwebtext | wikitext | path to .txt/.jsonl files"),
        Option("--n-prompts", n_prompts, "natural-text prompts", int),
        Option("--seq-len", seq_len, f"tokens per prompt, BOS included ({CAPPED})", int),
    )


SUBMATRIX_OPTIONS = (
    Option("--start", 60, "first position of the submatrix shown", int, low=0),
    Option("--size", 50, "side of the submatrix shown (the post: 50)", int, low=2),
)


def main_entry(main: Callable, argv: Sequence[str] | None = None):
    """Run a script's ``main``: a :class:`UsageError` or a folder that cannot be written
    (:func:`~gpt2_posheads.cli.output.write_failure`) is one ``error:`` line and status 2; a stop signal
    (:func:`stop_on_signals`; a download stops too) one line and 128 + its number; either way staged outputs are
    dropped and earlier results kept. A measurement with nothing in it or a NaN the model computed ends the run with
    every claim ``not testable`` and the reason. Anything else keeps its traceback (a bug). The console cannot end
    the run (:class:`ConsoleStream`): ``script | head -2`` exits 0, not 141 (SIGPIPE), which would tell a ``set -o
    pipefail`` pipeline that the work was cut short when only the reading was."""
    restore, restore_console, stopped = stop_on_signals(), guard_console(), None

    def fail(message: str, code: int = 2) -> SystemExit:
        abort_open_outputs()
        print(message, file=sys.stderr)
        return SystemExit(code)

    try:
        return main(argv)
    except UsageError as e:
        raise fail(f"error: {e}") from None
    except (NonFiniteError, NothingMeasuredError) as e:  # every claim of the run is not testable, and says why
        if finish_not_testable(f"not testable: {e}"):
            print(f"not testable: {e}", file=sys.stderr)
            return 0
        if isinstance(e, NothingMeasuredError):
            raise fail(f"error: {e}") from None
        raise fail(f"error: model: {e}; a model whose outputs are finite", 1) from None
    except OSError as e:
        message = write_failure(e)  # names the open output's folder: before it is aborted
        if message is None:
            abort_open_outputs()
            raise
        raise fail(f"error: {message}") from None
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (Terminated)
        stopped = e
        why = f"terminated ({e.name})" if isinstance(e, Terminated) else "interrupted"
        more = "" if isinstance(e, Terminated) else " (resumable work resumes on the next run)"
        raise fail(f"\n{why}: earlier results are kept as they were{more}", exit_status(e)) from None
    except BaseException:
        abort_open_outputs()
        raise
    finally:
        restore_console()
        if restore is not None:
            restore(stopped)


STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``kill``, schedulers) or SIGHUP (the terminal closed), handled as Ctrl-C is; ``name``:
    ``"SIGTERM"``."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name


def exit_status(e: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports it: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP."""
    return 128 + (e.signum if isinstance(e, Terminated) else int(signal.SIGINT))


def stopped_by(status: int) -> KeyboardInterrupt | None:
    """The interrupt ``status`` reports (:func:`exit_status`, or ``-N`` from a child), to raise again; or ``None``."""
    for s in STOP_SIGNALS:
        if status in (128 + s, -s):
            return KeyboardInterrupt() if s == signal.SIGINT else Terminated(s)
    return None


def stop_on_signals() -> Callable[[KeyboardInterrupt | None], None] | None:
    """In the main thread, make Ctrl-C raise ``KeyboardInterrupt`` and SIGTERM/SIGHUP :class:`Terminated`; the first
    ignores all three from then on (the run cleans up undisturbed, a second prints no traceback); one ignored from the
    start (``nohup``) stays ignored. Returns ``restore(stopped)`` (after SIGTERM/SIGHUP those stay ignored: the
    process is ending as told); ``None`` off the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    ours = [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]

    def handler(signum, frame):
        for s in ours:
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    previous = {s: signal.signal(s, handler) for s in ours}

    def restore(stopped: KeyboardInterrupt | None = None) -> None:
        for s, h in previous.items():
            ending = isinstance(stopped, Terminated) and s != signal.SIGINT
            signal.signal(s, signal.SIG_IGN if ending else signal.SIG_DFL if h is None else h)

    return restore


class ConsoleStream:
    """``sys.stdout``/``sys.stderr`` that can never end a run: once the reader stops (``script | head -2``) or the
    console fails (any ``OSError``) the rest goes to ``/dev/null``; a character the encoding cannot show
    (``PYTHONIOENCODING=ascii``) is replaced instead of raising."""

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
        """Point the stream's descriptor at ``/dev/null``: its buffer and the flush at exit go nowhere, not raising."""
        self.gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd, null = self.stream.fileno(), os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)
            self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def guard_console():
    """Put :class:`ConsoleStream` in front of ``sys.stdout`` and ``sys.stderr``; returns the function that undoes it."""
    saved = sys.stdout, sys.stderr
    guards = [ConsoleStream(s) if s is not None and not isinstance(s, ConsoleStream) else s for s in saved]
    sys.stdout, sys.stderr = guards

    def restore() -> None:
        for g in guards:
            if isinstance(g, ConsoleStream):
                g.flush()
        sys.stdout, sys.stderr = saved

    return restore


def int_list(name: str, text: str | None, low: int = 0, high: int | None = None) -> list[int] | None:
    """``"0,1,3"`` → ``[0, 1, 3]``, each within ``low..high``."""
    if text is None:
        return None
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(name, f"{text!r} is not a comma-separated list of integers", "e.g. 0,1,2") from None
    if not vals:
        raise UsageError(name, "is empty", "give at least one value, e.g. 0,1")
    top = INT64[1] if high is None else high  # past int64 no integer is taken, whatever the list
    bad = next((v for v in vals if not low <= v <= top), None)
    if bad is not None:
        allowed = f"allowed {low}..{high}" if high is not None else f"allowed integers >= {low}"
        if high is None and bad > top:
            allowed = f"allowed {low}..{top} (what torch takes)"
        raise UsageError(name, f"{bad} is out of range", allowed)
    return vals


def name_list(text: str, param: str = "", allowed: Sequence[str] = (), what: str = "", empty: str = "") -> list[str]:
    """The names in comma-separated ``text``; with ``allowed``, each one of them, else one line naming the unknown
    ``what`` (``"script(s)"``), or ``empty`` when none is given."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if allowed and (unknown or not names):
        raise UsageError(param, f"unknown {what} {unknown}" if names else empty, f"allowed {', '.join(allowed)}")
    return names


def float_list(name: str, text: str, low: float | None = None) -> list[float]:
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(name, f"{text!r} is not a comma-separated list of numbers", "e.g. 1,2,3") from None
    if not vals:
        raise UsageError(name, f"{text!r} has no values", "give at least one number", "e.g. 1,2,3")
    for v in vals:
        if not math.isfinite(v):
            raise UsageError(name, f"{v} is not a finite number", "allowed finite numbers", "e.g. 1,2,3")
        if low is not None and v < low:
            raise UsageError(name, f"{v:g} is out of range", f"allowed numbers >= {low:g}", "e.g. 1,2,3")
    return vals

"""Options every script shares, and the checks that need no model.

A script's life: parse → :func:`precheck` everything that does not need the model (model folder, device,
prompt source, numbers, ``--heads`` and layers against the folder's ``config.json``) → open the output
folder → load → check what needs the model → measure → judge → write. A user's mistake at any step is
one line ``error: <parameter>: <what is wrong>; <allowed>; <hint>`` and exit status 2 (:func:`main_entry`);
a legitimate input that must be adjusted is adjusted and said (:func:`note`); internal errors keep their
traceback.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..model.folder import WEIGHT_FILES, folder_problem
from ..model.loading import hub_model_cached, hub_reachable
from ..model.paths import SHIPPED_MODELS, models_dir, shipped_model_dir
from ..model.validation import NonFiniteError, NothingMeasuredError, UsageError, path_kind
from .heads import HeadSpec
from .output import abort_open_outputs, finish_not_testable, guard_console, write_failure

PROMPT_SOURCES = ("auto", "openwebtext", "wikitext")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's example blocks as written; adds each default once (unless the help names it)."""

    def _get_help_string(self, action):
        h = action.help or ""
        if (
            "default" in h.lower()
            or action.default is None
            or action.default is False
            or action.default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return h
        return h + " (default: %(default)s)"


INT64 = (-(1 << 63), (1 << 63) - 1)  # what torch and NumPy take as one integer
SEED_RANGE = (0, (1 << 32) - 1)  # what every random generator here takes as a seed (NumPy's is the narrowest)
_SEEN = "_options_given"  # namespace attribute that records the options given while parsing (removed after)


def _int_type(low: int, high: int, name: str = "int"):
    """An argparse ``type``: an integer within ``low..high``. Not an integer: argparse's ``invalid int value``; outside
    the range: the range, in one line.

    ``(low, high) == INT64`` (an option whose own range the command checks after parsing: :func:`positive`,
    :func:`int_list`, :func:`check_layer_arg`): an integer past int64 is passed on as it is, and that check refuses it
    naming the option's own range (``--every``: ``allowed 2..9223372036854775807``), not int64's, which holds values
    the option refuses. Every integer option of every command is checked so (``tests/cli/test_values.py``)."""
    deferred = (low, high) == INT64

    def parse(text: str) -> int:
        v = int(text)  # ValueError: argparse says "invalid int value: 'abc'"
        if not low <= v <= high and not deferred:
            raise argparse.ArgumentTypeError(f"{v} is out of range; allowed {low}..{high}")
        return v

    parse.__name__ = name
    return parse


def _empty_ok(action: argparse.Action) -> bool:
    """Whether an empty value means something for this option: its default is empty (``--models``), or its help says
    what ``''`` does (``--model-dirs '' for none``)."""
    return action.default == "" or "''" in (action.help or "")


def _check_given(action: argparse.Action, namespace, values, option_string: str | None) -> None:
    """Refuse an empty or blank value (unless the option says what one means), and an option given a second time
    (argparse would keep the last silently)."""
    if isinstance(values, str) and not values.strip() and not _empty_ok(action):
        raise argparse.ArgumentError(
            action,
            f"the value is empty ({values!r}); a non-empty value; leave the option out to use its default",
        )
    seen = namespace.__dict__.setdefault(_SEEN, {})
    if action.dest in seen and action.option_strings:
        first = seen[action.dest]
        raise argparse.ArgumentError(
            action,
            f"given twice ({first!r}, then {values!r}); give it once",
        )
    seen[action.dest] = values


class _StoreOnce(argparse._StoreAction):
    """``store``, but an option given twice (``--seq-len 64 --seq-len 128``) or with an empty value (``--out ""``) is
    an error instead of the last or the empty value silently winning."""

    def __call__(self, parser, namespace, values, option_string=None):
        _check_given(self, namespace, values, option_string)
        super().__call__(parser, namespace, values, option_string)


class _AppendNonEmpty(argparse._AppendAction):
    """``append`` (an option meant to be repeated, such as ``--prompt``): an empty value is an error."""

    def __call__(self, parser, namespace, values, option_string=None):
        if isinstance(values, str) and not values.strip() and not _empty_ok(self):
            raise argparse.ArgumentError(
                self, f"the value is empty ({values!r}); a non-empty value; leave the option out to use its default"
            )
        super().__call__(parser, namespace, values, option_string)


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are the one-line ``error: ...`` of every other user mistake, and which refuses what
    argparse lets through silently: an option given twice (options meant to repeat use ``action="append"``), an empty
    or blank value (``--out ""``; an option whose help says what ``''`` means takes it), an integer outside what
    torch takes (``--seed 2**64``; a seed is 0..2**32-1)."""

    def __init__(self, *a, **kw):
        kw.setdefault("formatter_class", _Formatter)
        super().__init__(*a, **kw)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self.register("action", "append", _AppendNonEmpty)

    def add_argument(self, *args, **kwargs):
        if kwargs.get("type") is int:
            dest = kwargs.get("dest") or next((a for a in args if a.startswith("--")), args[0] if args else "")
            seed = dest.lstrip("-").replace("-", "_") == "seed"
            kwargs["type"] = _int_type(*(SEED_RANGE if seed else INT64))
        return super().add_argument(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        ns.__dict__.pop(_SEEN, None)
        return ns, extras

    def error(self, message: str):  # noqa: D401 - argparse API
        message = re.sub(r"^argument (\S+?)(/\S+)?: ", r"\1: ", message)
        print(f"error: {message}; see --help", file=sys.stderr)
        raise SystemExit(2)


def experiment_parser(description: str, model: bool = True, out_help: str | None = None) -> Parser:
    """A parser with the options every experiment takes."""
    p = Parser(description=description)
    if model:
        p.add_argument(
            "--model",
            default="gpt2",
            help="Hugging Face hub name of the model, or a shipped model by name (mini-gpt2, route-gpt2, "
            "lookalike-wpos, ...: offline)",
        )
        p.add_argument(
            "--model-dir",
            default=None,
            help="local Hugging Face-format model directory (overrides --model)",
        )
        p.add_argument("--device", default=None, help="torch device: cpu, cuda, cuda:N (default: cuda if available)")
    p.add_argument(
        "--out",
        default=None,
        help=out_help
        or "output folder (default: results/<script>/<model>); a "
        "folder holding files this toolkit did not write is refused unless --force",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into an --out folder that holds other files (they are kept; none is replaced)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--no-png", action="store_true", help="write HTML figures only (skip kaleido/Chromium)")
    return p


def main_entry(main: Callable, argv: Sequence[str] | None = None):
    """Run a script's ``main``: a :class:`UsageError` is one ``error:`` line and exit status 2; Ctrl-C or an
    error leaves every earlier result as it was (staged outputs are dropped); anything else keeps its
    traceback (it is a bug).

    Outside the measurement: the console cannot end the run (:class:`~gpt2_posheads.cli.output.ConsoleStream`). A
    reader that stops early (``script | head -2``) silences the rest of the output and the run finishes, writes its
    results and exits 0: the results are whole, and a status of 141 (killed by SIGPIPE) would tell a caller, or a
    ``set -o pipefail`` pipeline, that the work was cut short when only the reading was. A character the console
    cannot show is replaced. A folder that cannot be written (a full disk or quota, a file-size limit, a read-only file
    system: :func:`~gpt2_posheads.cli.output.write_failure`) is one line naming it, exit status 2, with earlier
    results kept (the staged output is dropped). A measurement with nothing in it
    (:class:`~gpt2_posheads.model.validation.NothingMeasuredError`) or a NaN the model computed ends the run with
    every claim ``not testable`` and the reason."""
    previous = _terminate_as_interrupt()
    restore_console = guard_console()
    try:
        return main(argv)
    except UsageError as e:
        abort_open_outputs()
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except (NonFiniteError, NothingMeasuredError) as e:  # every claim of the run is not testable, and says why
        if not finish_not_testable(f"not testable: {e}"):
            abort_open_outputs()
            if isinstance(e, NothingMeasuredError):
                print(f"error: {e}", file=sys.stderr)
                raise SystemExit(2) from None
            print(f"error: model: {e}; a model whose outputs are finite", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"not testable: {e}", file=sys.stderr)
        return 0
    except OSError as e:
        message = write_failure(e)  # names the open output's folder: before it is aborted
        abort_open_outputs()
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    except Terminated:
        abort_open_outputs()
        print("\nterminated (SIGTERM): earlier results are kept as they were", file=sys.stderr)
        raise SystemExit(143) from None
    except KeyboardInterrupt:
        abort_open_outputs()
        print(
            "\ninterrupted: earlier results are kept as they were (resumable work resumes on the next run)",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    except BaseException:
        abort_open_outputs()
        raise
    finally:
        restore_console()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``timeout`` and job schedulers send), handled as Ctrl-C is: staged outputs dropped, locks
    released, earlier results kept."""


def _terminate_as_interrupt():
    """Make SIGTERM raise :class:`Terminated` in the main thread; the previous handler (``None`` off the main
    thread, where signals cannot be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise Terminated

    return signal.signal(signal.SIGTERM, handler)


# --- numbers -------------------------------------------------------------------------------------------


def positive(name: str, value, low: float = 1, high: float | None = None, kind: str = "an integer"):
    """``value`` unless it lies outside ``low..high`` (then a :class:`UsageError` naming ``name`` and that range). An
    integer past int64 (what torch takes) is outside every integer option's range: refused, naming ``low`` and int64's
    top."""
    if value is None:
        return value
    if isinstance(value, int) and value > INT64[1] and (high is None or high > INT64[1]):
        raise UsageError(name, f"{value} is out of range", f"allowed {low:g}..{INT64[1]} (what torch takes)")
    if (
        not (isinstance(value, (int, float)) and math.isfinite(value))
        or value < low
        or (high is not None and value > high)
    ):
        allowed = f"allowed {low:g}..{high:g}" if high is not None else f"allowed {kind} >= {low:g}"
        raise UsageError(name, f"{value} is out of range", allowed)
    return value


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
    for v in vals:
        if v < low or v > top:
            allowed = f"allowed {low}..{high}" if high is not None else f"allowed integers >= {low}"
            if v > top:
                allowed = f"allowed {low}..{top}" + (" (what torch takes)" if high is None else "")
            raise UsageError(name, f"{v} is out of range", allowed)
    return vals


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


# --- model folder, device, prompts -------------------------------------------------------------------------


def _nearest_dir(path: Path) -> str | None:
    """A model folder beside ``path`` (or in the models folder) whose name is ``path``'s name with a typo, else a
    shipped model of such a name: a hint never names a folder of another model's name (``data/route-gpt2`` for
    ``data/mini-gpt``)."""
    parent = path.parent if path.parent.is_dir() else models_dir()
    cands = [c for c in parent.iterdir() if c.is_dir() and (c / "config.json").exists()] if parent.is_dir() else []
    best = difflib.get_close_matches(path.name, [c.name for c in cands], n=1, cutoff=0.8)
    if best:
        return str(parent / best[0])
    shipped = difflib.get_close_matches(path.name, SHIPPED_MODELS, n=1, cutoff=0.8)
    return f"--model {shipped[0]} (a shipped model, by name)" if shipped else None


def check_model_dir(model_dir: str | None) -> dict | None:
    """A ``--model-dir`` must be a Hugging Face folder: ``config.json`` that is a JSON object, and weights.
    Returns the parsed config (``None`` without ``--model-dir``). It is never taken as a hub name."""
    if model_dir is None:
        return None
    p = Path(model_dir).expanduser()
    kind = path_kind(p)
    if kind == "file":
        raise UsageError(
            "--model-dir",
            f"{model_dir} is a file, not a folder",
            "a folder with config.json and model weights",
            f"its folder is {p.parent}",
        )
    if kind not in ("folder", "missing"):  # /dev/null, a FIFO, a symlink loop: say what it is, suggest nothing
        raise UsageError("--model-dir", f"{model_dir} is {kind}, not a folder", "a folder with config.json and weights")
    if kind == "missing":
        from ..model.paths import COMPILED_MODELS

        near = _nearest_dir(p)
        raise UsageError(
            "--model-dir",
            f"{model_dir} does not exist",
            "a folder with config.json and model weights",
            f"--model {p.name} builds it on first use (seconds)"
            if p.name in COMPILED_MODELS
            else f"--model {p.name} loads the shipped one by name"
            if p.name in SHIPPED_MODELS
            else f"did you mean {near}?"
            if near
            else "shipped models load by name: --model mini-gpt2, --model route-gpt2",
        )
    if not (p / "config.json").is_file():
        raise UsageError(
            "--model-dir",
            f"{model_dir} has no config.json",
            "a Hugging Face-format model folder",
            "or a shipped model by name: --model mini-gpt2",
        )
    try:
        cfg = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(
            "--model-dir",
            f"{p / 'config.json'} is not valid JSON ({type(e).__name__})",
            "a Hugging Face config.json",
            "re-save the model with save_pretrained",
        ) from None
    if not isinstance(cfg, dict):
        raise UsageError("--model-dir", f"{p / 'config.json'} is not a JSON object", "a Hugging Face config.json")
    if not any((p / w).is_file() for w in WEIGHT_FILES) and not list(p.glob("*.safetensors")):
        raise UsageError(
            "--model-dir",
            f"{model_dir} holds no model weights",
            f"one of {', '.join(WEIGHT_FILES)}",
            "re-save the model with save_pretrained",
        )
    problem = folder_problem(p)
    if problem:
        raise UsageError(
            "--model-dir", problem, "a complete Hugging Face model folder", "re-save the model with save_pretrained"
        )
    return cfg


def model_folder(args) -> Path | None:
    """The local folder a script's model comes from: ``--model-dir``, or a shipped model named by ``--model``
    (``mini-gpt2``, ``route-gpt2``, ...; a compiled one is built on first use); ``None`` for a hub name."""
    if getattr(args, "model_dir", None):
        return Path(args.model_dir)
    name = getattr(args, "model", None)
    if name in SHIPPED_MODELS:
        try:
            return shipped_model_dir(name)
        except UsageError as e:  # a compiled model that cannot be built or rebuilt: said of --model, as given
            raise UsageError("--model", e.problem, e.allowed, e.hint) from None
    return None


def check_hub_names(hub: Sequence[str]) -> None:
    """Hub names (``--models``) need the Hugging Face hub: refuse them in one line, within seconds, when it is
    unreachable (before any model is loaded), and point at local folders."""
    missing = [name for name in hub if not hub_model_cached(name)]  # a complete cached copy loads offline
    if missing and not hub_reachable():
        raise UsageError(
            "--models",
            f"{', '.join(missing)} need the Hugging Face hub, which is unreachable, and are not cached",
            "hub names on a machine with internet",
            "or --model-dirs with local copies",
        )


def check_device(device: str | None) -> None:
    if device is None:
        return
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", device):
        raise UsageError("--device", f"{device!r} is not a device", "allowed cpu, cuda, cuda:N, mps")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(
                "--device", f"{device} asked but CUDA is not available on this machine", "use --device cpu"
            )
        if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
            raise UsageError(
                "--device", f"{device} does not exist", f"allowed cuda:0..cuda:{torch.cuda.device_count() - 1}"
            )
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise UsageError("--device", "mps asked but not available", "use --device cpu")


def check_prompt_source(source: str) -> None:
    """``auto``/``openwebtext``/``wikitext`` or an existing, non-empty UTF-8 ``.txt``/``.jsonl`` file or folder.
    ``openwebtext`` is read here (then remembered), so that a dataset that cannot be read is said before any model
    loads."""
    if source == "openwebtext":
        from ..analysis.prompts import documents

        try:
            documents(source)
        except UsageError as e:
            raise UsageError("--prompts", e.problem, e.allowed, e.hint) from None
    if source in PROMPT_SOURCES:
        return
    p = Path(source)
    kind = path_kind(p)
    if kind not in ("file", "folder", "missing"):  # a FIFO would block the read; /dev/null reads as nothing
        raise UsageError(
            "--prompts", f"{source} is {kind}, not a file or folder", "a .txt/.jsonl file or a folder of them"
        )
    if kind == "missing":
        near = difflib.get_close_matches(source, PROMPT_SOURCES, n=1)
        raise UsageError(
            "--prompts",
            f"{source!r} is neither a known source nor an existing file",
            "allowed auto, openwebtext, wikitext, or a path to .txt/.jsonl files",
            f"did you mean {near[0]}?" if near else "check the path",
        )
    if p.is_file():
        if p.suffix not in (".txt", ".jsonl"):
            raise UsageError(
                "--prompts", f"{source} is a {p.suffix or 'suffix-less'} file", "allowed .txt or .jsonl files"
            )
        raw = p.read_bytes()
        if b"\x00" in raw[:65536]:
            raise UsageError(
                "--prompts",
                f"{source} is a binary file",
                "UTF-8 text: .txt of documents separated by blank lines, or .jsonl with a 'text' field",
            )
        text = raw.decode("utf-8", errors="replace")
        if not text.strip():
            raise UsageError(
                "--prompts",
                f"{source} is empty",
                "a .txt of documents separated by blank lines, or .jsonl with a 'text' field",
            )
    from ..analysis.prompts import file_documents

    try:
        file_documents([p])  # reads and checks every document (a .jsonl line without 'text', ...)
    except UsageError as e:
        raise UsageError("--prompts", e.problem, e.allowed, e.hint) from None


# --- what the checks know of the model -----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """What the checks need to know of a model: from ``config.json`` before loading, or ``model.cfg`` after."""

    n_layers: int
    n_heads: int
    n_ctx: int
    d_model: int | None = None

    @classmethod
    def of(cls, model) -> ModelShape:
        return cls(model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_ctx, model.cfg.d_model)

    @classmethod
    def from_config(cls, cfg: dict | None) -> ModelShape | None:
        """From a Hugging Face ``config.json`` (GPT-2, GPT-Neo(X), OPT, Llama names), or ``None``."""
        if not cfg:
            return None
        get = lambda *ks: next((cfg[k] for k in ks if isinstance(cfg.get(k), int)), None)  # noqa: E731
        shape = (
            get("n_layer", "num_hidden_layers", "num_layers"),
            get("n_head", "num_attention_heads", "num_heads"),
            get("n_positions", "max_position_embeddings", "n_ctx"),
            get("n_embd", "hidden_size", "d_model"),
        )
        return cls(*shape) if all(v is not None for v in shape[:3]) else None


def check_layer_arg(name: str, layer: int | None, shape: ModelShape | None, allow_final: bool = False) -> None:
    if shape is None or layer is None:
        return
    top = shape.n_layers if allow_final else shape.n_layers - 1
    if not 0 <= layer <= top:
        what = f"0..{top}" + (" (the last is the final residual stream)" if allow_final else "")
        raise UsageError(name, f"{layer} is out of range for this {shape.n_layers}-layer model", f"allowed {what}")


@dataclass(frozen=True)
class Checked:
    """What :func:`precheck` parsed (``args`` itself is never changed)."""

    shape: ModelShape | None = None
    heads: HeadSpec | None = None
    layers: tuple[int, ...] | None = None


def precheck(args, *, layer_final: bool = False) -> Checked:
    """Every check that needs no model: model folder, device, prompt source and counts, ``--heads``,
    ``--layer``/``--layers`` against the folder's ``config.json``."""
    shape = None
    if hasattr(args, "model_dir"):
        folder = model_folder(args)
        shape = ModelShape.from_config(check_model_dir(None if folder is None else str(folder)))
        check_device(args.device)
    if hasattr(args, "prompts"):
        check_prompt_source(args.prompts)
    if hasattr(args, "n_prompts"):
        positive("--n-prompts", args.n_prompts)
    if getattr(args, "seq_len", None) is not None:
        positive("--seq-len", args.seq_len, 2)
    heads = HeadSpec.parse(getattr(args, "heads", None))
    if heads is not None:
        heads.check(shape)
    if getattr(args, "layer", None) is not None:
        check_layer_arg("--layer", args.layer, shape, allow_final=layer_final)
    layers = None
    if getattr(args, "layers", None) is not None:
        layers = tuple(int_list("--layers", args.layers, 0, shape.n_layers - 1 if shape else None))
    return Checked(shape, heads, layers)


def postcheck(args, checked: Checked, model, *, layer_final: bool = False) -> ModelShape:
    """The checks of :func:`precheck` that needed the model (a hub model has no ``config.json`` to peek)."""
    shape = ModelShape.of(model)
    if checked.heads is not None:
        checked.heads.check(shape)
    if getattr(args, "layer", None) is not None:
        check_layer_arg("--layer", args.layer, shape, allow_final=layer_final)
    for v in checked.layers or ():
        if v >= shape.n_layers:
            raise UsageError("--layers", f"{v} is out of range", f"allowed 0..{shape.n_layers - 1}")
    return shape


def add_prompt_args(p: argparse.ArgumentParser, n_prompts: int = 16, seq_len: int = 256) -> None:
    p.add_argument("--prompts", default="auto", help="auto | openwebtext | wikitext | path to .txt/.jsonl files")
    p.add_argument("--n-prompts", type=int, default=n_prompts, help="natural-text prompts")
    p.add_argument(
        "--seq-len",
        type=int,
        default=seq_len,
        help="tokens per prompt, BOS included (a value above the model's context is capped at it, and said)",
    )


def add_submatrix_args(p: argparse.ArgumentParser, start: int = 60, size: int = 50) -> None:
    p.add_argument("--start", type=int, default=start, help="first position of the submatrix shown")
    p.add_argument("--size", type=int, default=size, help="side of the submatrix shown (the post: 50)")


def check_submatrix_args(args) -> None:
    positive("--start", args.start, 0)
    positive("--size", args.size, 2)

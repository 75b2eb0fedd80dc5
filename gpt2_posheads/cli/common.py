"""Command-line pieces every experiment script shares: options, checks, model, output folder, claims.

A script's life: parse → :func:`precheck` everything that does not need the model (model directory,
device, prompt source, numbers) → load → check what needs the model (layers, heads, ``seq_len``) →
compute → judge claims (:mod:`gpt2_posheads.claims.verdicts`) → write figures and ``summary.json``.
A user's mistake at any step is one line ``error: <parameter>: <what is wrong>; <allowed>; <hint>``
and exit status 2 (:func:`main_entry`); internal errors keep their traceback.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from ..model.paths import REPO_ROOT
from ..model.loading import ModelLoadError, load_model
from ..report.plotting import save_figure
from ..model.validation import HEAD_NAME, UsageError, parse_head
from ..claims.verdicts import Claim, claims_table, verdict_counts

PROMPT_SOURCES = ("auto", "openwebtext", "wikitext")


# --- parser ------------------------------------------------------------------------------------------

class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's example blocks as written; adds each default once (unless the help names it)."""

    def _get_help_string(self, action):
        h = action.help or ""
        if ("default" in h.lower() or action.default is None or action.default is False
                or action.default is argparse.SUPPRESS or not action.option_strings):
            return h
        return h + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are the one-line ``error: ...`` of every other user mistake."""

    def error(self, message: str):  # noqa: D401 - argparse API
        message = re.sub(r"^argument (\S+?)(/\S+)?: ", r"\1: ", message)
        print(f"error: {message}; see --help", file=sys.stderr)
        raise SystemExit(2)


def experiment_parser(description: str, model: bool = True, default_out: str | None = None) -> Parser:
    """A parser with the options every experiment takes."""
    p = Parser(description=description, formatter_class=_Formatter)
    if model:
        p.add_argument("--model", default="gpt2", help="Hugging Face hub name of the model")
        p.add_argument("--model-dir", default=None, help="local Hugging Face-format model directory (overrides "
                       "--model), e.g. data/mini-gpt2 offline")
        p.add_argument("--device", default=None, help="torch device: cpu, cuda, cuda:N (default: cuda if available)")
    p.add_argument("--out", default=default_out, help="output folder (default: results/<script>/<model>)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--no-png", action="store_true", help="write HTML figures only (skip kaleido/Chromium)")
    return p


def main_entry(main: Callable, argv: Sequence[str] | None = None):
    """Run a script's ``main``: a :class:`UsageError` is one ``error:`` line and exit status 2, Ctrl-C
    says that finished results were kept; anything else keeps its traceback (it is a bug)."""
    try:
        return main(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("\ninterrupted: results written so far are kept (resumable work resumes on the next run)", file=sys.stderr)
        raise SystemExit(130) from None


# --- checks that need no model ----------------------------------------------------------------------

def positive(name: str, value, low: float = 1, high: float | None = None, kind: str = "an integer"):
    """``value`` unless it lies outside ``low..high`` (then a :class:`UsageError` naming ``name``)."""
    if value is None:
        return value
    if not (isinstance(value, (int, float)) and math.isfinite(value)) or value < low or (high is not None and value > high):
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
    for v in vals:
        if v < low or (high is not None and v > high):
            raise UsageError(name, f"{v} is out of range", f"allowed {low}..{high}" if high is not None else f">= {low}")
    return vals


def float_list(name: str, text: str, low: float | None = None) -> list[float]:
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(name, f"{text!r} is not a comma-separated list of numbers", "e.g. 1,2,3") from None
    if not vals or (low is not None and min(vals) < low):
        raise UsageError(name, f"{text!r} has no values or a value below {low}", "e.g. 1,2,3")
    return vals


def _nearest_dir(path: Path) -> str | None:
    parent = path.parent if path.parent.is_dir() else REPO_ROOT / "data"
    cands = [str(c) for c in parent.iterdir() if c.is_dir() and (c / "config.json").exists()] if parent.is_dir() else []
    best = difflib.get_close_matches(str(path), cands, n=1, cutoff=0.5)
    return best[0] if best else None


def check_model_dir(model_dir: str | None) -> None:
    """A ``--model-dir`` must be an existing Hugging Face folder; it is never taken as a hub name."""
    if model_dir is None:
        return
    p = Path(model_dir).expanduser()
    if not p.is_dir():
        near = _nearest_dir(p)
        raise UsageError("--model-dir", f"{model_dir} does not exist", "a folder with config.json and model weights",
                         f"did you mean {near}?" if near else "the repository ships data/mini-gpt2")
    if not (p / "config.json").exists():
        raise UsageError("--model-dir", f"{model_dir} has no config.json", "a Hugging Face-format model folder",
                         "e.g. data/mini-gpt2")


def check_device(device: str | None) -> None:
    if device is None:
        return
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", device):
        raise UsageError("--device", f"{device!r} is not a device", "allowed cpu, cuda, cuda:N, mps")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError("--device", f"{device} asked but CUDA is not available on this machine", "use --device cpu")
        if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
            raise UsageError("--device", f"{device} does not exist", f"allowed cuda:0..cuda:{torch.cuda.device_count() - 1}")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise UsageError("--device", "mps asked but not available", "use --device cpu")


def check_prompt_source(source: str) -> None:
    """``auto``/``openwebtext``/``wikitext`` or an existing, non-empty ``.txt``/``.jsonl`` file or folder."""
    if source in PROMPT_SOURCES:
        return
    p = Path(source)
    if not p.exists():
        near = difflib.get_close_matches(source, PROMPT_SOURCES, n=1)
        raise UsageError("--prompts", f"{source!r} is neither a known source nor an existing file",
                         "allowed auto, openwebtext, wikitext, or a path to .txt/.jsonl files",
                         f"did you mean {near[0]}?" if near else "check the path")
    if p.is_file():
        if p.suffix not in (".txt", ".jsonl"):
            raise UsageError("--prompts", f"{source} is a {p.suffix or 'suffix-less'} file", "allowed .txt or .jsonl files")
        if not p.read_text(encoding="utf-8", errors="replace").strip():
            raise UsageError("--prompts", f"{source} is empty", "a .txt of documents separated by blank lines, or "
                             ".jsonl with a 'text' field")
    from ..analysis.prompts import file_documents

    try:
        file_documents([p])  # reads and checks every document (a .jsonl line without 'text', ...)
    except UsageError as e:
        raise UsageError("--prompts", e.problem, e.allowed, e.hint) from None


def peek_config(model_dir: str | None) -> dict | None:
    """``{"n_layers", "n_heads", "n_ctx"}`` from a model directory's ``config.json``, without loading it."""
    if model_dir is None:
        return None
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    get = lambda *ks: next((cfg[k] for k in ks if k in cfg), None)  # noqa: E731
    out = {"n_layers": get("n_layer", "num_hidden_layers"), "n_heads": get("n_head", "num_attention_heads"),
           "n_ctx": get("n_positions", "max_position_embeddings")}
    return out if all(isinstance(v, int) for v in out.values()) else None


@dataclass
class ModelShape:
    """What the checks need to know of a model: from ``config.json`` before loading, or ``model.cfg`` after."""

    n_layers: int
    n_heads: int
    n_ctx: int

    @classmethod
    def of(cls, model) -> "ModelShape":
        return cls(model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_ctx)


def check_layer_arg(name: str, layer: int, shape: ModelShape | None, allow_final: bool = False) -> None:
    if shape is None or layer is None:
        return
    top = shape.n_layers if allow_final else shape.n_layers - 1
    if not 0 <= layer <= top:
        what = f"0..{top}" + (" (the last is the final residual stream)" if allow_final else "")
        raise UsageError(name, f"{layer} is out of range for this {shape.n_layers}-layer model", f"allowed {what}")


# --- heads ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HeadSpec:
    """``--heads``: explicit names, or ``auto:N`` (the model's N most previous-token-like heads)."""

    names: tuple[str, ...] = ()
    auto: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> "HeadSpec | None":
        if text is None:
            return None
        t = text.strip()
        if t.lower().startswith("auto"):
            m = re.fullmatch(r"auto(?::(\d+))?", t.lower())
            if not m:
                raise UsageError("--heads", f"{text!r} is not of the form auto:N", "e.g. auto:3")
            n = int(m.group(1) or 3)
            if n < 1:
                raise UsageError("--heads", f"auto:{n} asks for no heads", "allowed auto:1 .. auto:<number of heads>")
            return cls(auto=n)
        names = tuple(s.strip().upper() for s in t.split(",") if s.strip())
        if not names:
            raise UsageError("--heads", "is empty", "comma-separated names like L4H11, or auto:N")
        for s in names:
            if not HEAD_NAME.match(s):
                raise UsageError("--heads", f"{s!r} is not a head name", "names look like L4H11; or auto:N")
        return cls(names=names)

    def check(self, shape: ModelShape | None) -> None:
        if shape is None:
            return
        total = shape.n_layers * shape.n_heads
        if self.auto is not None and self.auto > total:
            raise UsageError("--heads", f"auto:{self.auto} asks for more heads than the model has",
                             f"allowed auto:1 .. auto:{total}")
        for s in self.names:
            l, h = (int(x) for x in HEAD_NAME.match(s).groups())
            if l >= shape.n_layers or h >= shape.n_heads:
                raise UsageError("--heads", f"unknown head {s}",
                                 f"this model has layers 0..{shape.n_layers - 1} and heads 0..{shape.n_heads - 1}")


# GPT-2 small's real W_pos[0, :3]; the post's head names are defaults only on that model.
_GPT2_WPOS0 = torch.tensor([-0.0188, -0.1974, 0.0040])


def is_gpt2_small(model) -> bool:
    """True for OpenAI's GPT-2 small (shape and its ``W_pos``), never for another model of that shape."""
    c = model.cfg
    if (c.n_layers, c.n_heads, c.d_model, c.n_ctx) != (12, 12, 768, 1024):
        return False
    try:
        from ..analysis.posembed import load_w_pos

        w = load_w_pos(model)[0, :3].float().cpu()
    except Exception:
        return False
    # compatibility mode centres W_pos rows; compare the raw and the centred forms loosely
    return bool(torch.allclose(w, _GPT2_WPOS0, atol=0.02)) or bool((w - _GPT2_WPOS0).abs().max() < 0.05)


def resolve_heads(model, spec: "HeadSpec | str | None", prompts: torch.Tensor | None = None,
                  post_default: Sequence[str] = (), auto_default: int = 3) -> list[tuple[int, int]]:
    """``--heads`` → ``[(layer, head)]``. With no ``--heads``: the post's heads on GPT-2 small, else
    ``auto:auto_default`` (the post's names mean nothing on another model)."""
    if isinstance(spec, str):
        spec = HeadSpec.parse(spec)
    if spec is None:
        spec = HeadSpec(names=tuple(post_default)) if post_default and is_gpt2_small(model) else HeadSpec(auto=auto_default)
    spec.check(ModelShape.of(model))
    if spec.auto is not None:
        from ..analysis.diagonals import rank_prev_heads

        if prompts is None:
            raise ValueError("auto heads need prompts to rank heads on")
        df = rank_prev_heads(model, prompts[: min(8, len(prompts))], max_offset=16, progress=False)
        return [(int(r.layer), int(r.head)) for r in df.head(spec.auto).itertuples()]
    return [parse_head(s, model) for s in spec.names]


def add_heads_arg(p: argparse.ArgumentParser, post_default: str, help: str = "heads", auto_default: int = 3) -> None:
    p.add_argument("--heads", default=None,
                   help=f"{help}: comma-separated names like L4H11, or auto:N for the model's N most previous-token-"
                        f"like heads (default: {post_default} on GPT-2 small, auto:{auto_default} on any other model)")
    p.set_defaults(_post_heads=tuple(s for s in post_default.split(",") if s), _auto_heads=auto_default)


# --- model and prompts -------------------------------------------------------------------------------

def model_from_args(args):
    """Load ``--model-dir`` or ``--model``; a load failure is a one-line error."""
    try:
        return load_model(args.model_dir or args.model, device=args.device)
    except (ModelLoadError, FileNotFoundError) as e:
        raise UsageError("--model-dir" if args.model_dir else "--model", str(e)) from None


def model_label(args) -> str:
    return str(args.model_dir or args.model)


def model_slug(args) -> str:
    """A folder name for the model: the directory's name or the hub id with '/' → '--'."""
    if getattr(args, "model_dir", None):
        return Path(args.model_dir).resolve().name
    return str(getattr(args, "model", "model")).replace("/", "--")


def add_prompt_args(p: argparse.ArgumentParser, n_prompts: int = 16, seq_len: int = 256) -> None:
    p.add_argument("--prompts", default="auto", help="auto | openwebtext | wikitext | path to .txt/.jsonl files")
    p.add_argument("--n-prompts", type=int, default=n_prompts, help="natural-text prompts")
    p.add_argument("--seq-len", type=int, default=seq_len, help="tokens per prompt, BOS included (capped at n_ctx)")


def corpus_prompts(model, args) -> tuple[torch.Tensor, str]:
    """``[n_prompts, seq_len]`` natural-text prompts for ``args`` and a description of their source."""
    from ..analysis.prompts import documents, make_prompts

    docs, source = documents(args.prompts)
    seq_len = min(args.seq_len, model.cfg.n_ctx)
    return make_prompts(model.tokenizer, args.n_prompts, seq_len, seed=args.seed, docs=docs), source


def precheck(args) -> ModelShape | None:
    """Every check that needs no model: model folder, device, prompt source and counts, ``--heads``,
    ``--layer``/``--layers`` against the folder's ``config.json``. Returns the shape when known."""
    if hasattr(args, "model_dir"):
        check_model_dir(args.model_dir)
        check_device(args.device)
    shape = None
    cfg = peek_config(getattr(args, "model_dir", None))
    if cfg:
        shape = ModelShape(**cfg)
    if hasattr(args, "prompts"):
        check_prompt_source(args.prompts)
    if hasattr(args, "n_prompts"):
        positive("--n-prompts", args.n_prompts)
    if hasattr(args, "seq_len") and args.seq_len is not None:
        positive("--seq-len", args.seq_len, 2)
    if hasattr(args, "heads") and isinstance(args.heads, str):
        args.heads = HeadSpec.parse(args.heads)
    if isinstance(getattr(args, "heads", None), HeadSpec):
        args.heads.check(shape)
    if hasattr(args, "layer") and isinstance(getattr(args, "layer"), int):
        check_layer_arg("--layer", args.layer, shape, allow_final=getattr(args, "_layer_final", False))
    if isinstance(getattr(args, "layers", None), str):
        args.layers = int_list("--layers", args.layers, 0, shape.n_layers - 1 if shape else None)
    return shape


def postcheck(args, model) -> ModelShape:
    """The checks of :func:`precheck` that needed the model (a hub model has no ``config.json`` to peek)."""
    shape = ModelShape.of(model)
    if isinstance(getattr(args, "heads", None), HeadSpec):
        args.heads.check(shape)
    if hasattr(args, "layer") and isinstance(getattr(args, "layer"), int):
        check_layer_arg("--layer", args.layer, shape, allow_final=getattr(args, "_layer_final", False))
    if isinstance(getattr(args, "layers", None), list):
        for v in args.layers:
            if v >= shape.n_layers:
                raise UsageError("--layers", f"{v} is out of range", f"allowed 0..{shape.n_layers - 1}")
    return shape


# --- output ------------------------------------------------------------------------------------------

def _jsonable(x):
    if isinstance(x, Claim):
        return _jsonable(x.as_dict())
    if isinstance(x, torch.Tensor):
        return _jsonable(x.detach().cpu().tolist())
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, pd.DataFrame):
        return _jsonable(x.to_dict(orient="records"))
    if isinstance(x, Path):
        return str(x)
    return x


def write_json(path: str | Path, obj) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(obj), indent=2) + "\n")
    return path


def read_json(path: str | Path):
    return json.loads(Path(path).read_text())


RESULTS = REPO_ROOT / "results"
_OWNED = (".html", ".png", ".csv", ".json")


@dataclass
class Output:
    """An experiment's output folder ``results/<script>/<model>/``: figures (HTML+PNG), CSV tables,
    ``summary.json`` with the claims. The folder's own files are cleared first (never sub-folders such
    as a toy sweep's resumable ``runs/``), so a model's results never sit beside another's."""

    out_dir: Path
    png: bool = True
    written: list[Path] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    script: str = ""
    quick: bool = False

    @classmethod
    def from_args(cls, args, script_file: str, per_model: bool = True) -> "Output":
        stem = Path(script_file).stem
        if args.out:
            out = Path(args.out)
        else:
            out = RESULTS / stem
            if per_model and hasattr(args, "model"):
                out = out / model_slug(args)
        out.mkdir(parents=True, exist_ok=True)
        for f in out.iterdir():
            if f.is_file() and f.suffix in _OWNED:
                f.unlink()
        return cls(out, png=not args.no_png, script=stem, quick=bool(getattr(args, "quick", False)))

    def figure(self, fig, stem: str, **kw) -> None:
        self.written += save_figure(fig, self.out_dir, stem, png=self.png, **kw)

    def csv(self, df: pd.DataFrame, stem: str) -> None:
        p = self.out_dir / f"{stem}.csv"
        df.to_csv(p, index=False)
        self.written.append(p)

    def summary(self, obj: dict, claims: Sequence[Claim] = (), stem: str = "summary") -> Path:
        """Write ``summary.json``: ``obj`` plus ``claims`` (each ``{claim, post, measured, rule, verdict, why}``)
        and their verdict counts; prints the claim table."""
        obj = dict(obj)
        obj.setdefault("script", self.script)
        obj.setdefault("quick", self.quick)
        obj["claims"] = [c.as_dict() if isinstance(c, Claim) else c for c in claims]
        obj["verdicts"] = verdict_counts(obj["claims"])
        obj.setdefault("elapsed_s", round(time.time() - self.started, 2))
        obj["figures"] = [p.name for p in self.written if p.suffix in (".html", ".png")]
        p = write_json(self.out_dir / f"{stem}.json", obj)
        self.written.append(p)
        if obj["claims"]:
            print("\n" + claims_table(obj["claims"]))
        return p

    def report(self) -> None:
        print(f"\nwrote {len(self.written)} files to {self.out_dir}:")
        for p in self.written:
            print(f"  {p.name}")


def add_submatrix_args(p: argparse.ArgumentParser, start: int = 60, size: int = 50) -> None:
    p.add_argument("--start", type=int, default=start, help="first position of the submatrix shown")
    p.add_argument("--size", type=int, default=size, help="side of the submatrix shown (the post: 50)")


def submatrix(m: torch.Tensor, args) -> tuple[torch.Tensor, int]:
    """The ``--size`` square from ``--start`` (moved back to fit a short prompt) and its first position."""
    n = m.shape[0]
    start = max(0, min(args.start, n - args.size))
    e = min(start + args.size, n)
    return m[start:e, start:e], start


def gpt2_experiment(args, script_file: str):
    """The set-up of a GPT-2 experiment: ``(output, model, prompts, prompt source, heads)``.

    Checks every option it can before loading the model, the rest right after.
    """
    precheck(args)
    if hasattr(args, "start"):
        positive("--start", args.start, 0)
        positive("--size", args.size, 2)
    out = Output.from_args(args, script_file)
    model = model_from_args(args)
    postcheck(args, model)
    prompts, source = corpus_prompts(model, args)
    heads = resolve_heads(model, getattr(args, "heads", None), prompts, getattr(args, "_post_heads", ()),
                          getattr(args, "_auto_heads", 3))
    return out, model, prompts, source, heads


def ranked_experiment(args, script_file: str, pick: Callable | None = None):
    """:func:`gpt2_experiment` plus the model's per-diagonal masses ``[n_layers, n_heads, 17]`` and its
    previous-token ranking on the prompts: ``(output, model, prompts, source, heads, diag, ranking)``.

    ``pick(ranking) -> [(layer, head)]`` chooses the heads when ``--heads`` was not given on a model other
    than GPT-2 small (where the post's head names mean nothing); an empty pick keeps ``auto:N``.
    """
    from ..analysis.diagonals import diagonal_attention, rank_from_diagonals

    explicit = getattr(args, "heads", None) is not None
    out, model, prompts, source, heads = gpt2_experiment(args, script_file)
    diag = diagonal_attention(model, prompts, max_offset=16, progress=False)
    rank = rank_from_diagonals(diag)
    if pick is not None and not explicit and not is_gpt2_small(model):
        heads = pick(rank) or heads
    return out, model, prompts, source, heads, diag, rank

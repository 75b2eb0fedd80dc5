"""Argument checks shared by every analysis: each error names the parameter and its allowed range."""

from __future__ import annotations

import errno
import functools
import inspect
import math
import numbers
import re
import sys
from collections.abc import Iterable

HEAD_NAME = re.compile(r"^L(\d+)H(\d+)$")


class UsageError(ValueError):
    """A caller's mistake in one line, ``<parameter>: <what is wrong>; <allowed>; <hint>``: scripts print ``error:
    ...`` and exit 2 without a traceback; library callers get an ordinary ``ValueError``."""

    def __init__(self, param: str, problem: str, allowed: str = "", hint: str = ""):
        self.param, self.problem, self.allowed, self.hint = param, problem, allowed, hint
        super().__init__("; ".join(x for x in (f"{param}: {problem}", allowed, hint) if x))


def note(message: str) -> None:
    """Say that a legitimate input was adjusted, or a fallback taken (one line on stderr)."""
    print(f"note: {message}", file=sys.stderr)


def capped_seq_len(model, seq_len: int, name: str = "--seq-len") -> int:
    """``seq_len`` capped at the model's context, saying so (naming ``name``) when it is."""
    if seq_len > model.cfg.n_ctx:
        note(f"{name} {seq_len} is capped at the model's context, {model.cfg.n_ctx}")
        return model.cfg.n_ctx
    return seq_len


class NonFiniteError(RuntimeError):
    """A NaN or infinite number in what the model computed (a pattern, a logit, a residual): no claim resting on it
    can be judged; scripts end with every claim ``not testable`` and this message."""


class NothingMeasuredError(ValueError):
    """A measurement with nothing in it (no previous diagonal at this prompt length, no head with attention off BOS):
    a ``ValueError`` saying why; scripts end with every claim ``not testable`` and this message."""


def require_finite(x, what: str):
    """``x`` (a tensor or a float) unchanged, or :class:`NonFiniteError` saying ``what`` was not finite."""
    import torch

    t = torch.as_tensor(x)
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        n = int((~torch.isfinite(t)).sum())
        raise NonFiniteError(f"{what} is not finite ({n:,} NaN or infinite values of {t.numel():,})")
    return x


def as_index(name: str, value) -> int:
    """``value`` (an ``int``, a NumPy integer or a 0-d integer tensor) as an ``int``; a ``bool`` (``True`` is not layer
    1), a float (even ``2.0``), a string or anything else is a ``TypeError`` naming ``name``."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        raise TypeError(f"{name} must be an integer, got a bool ({value!r})")
    if isinstance(value, int):
        return int(value)
    if hasattr(value, "dtype") and hasattr(value, "ndim"):  # a NumPy scalar or array, a tensor
        kind = str(value.dtype)
        if getattr(value, "ndim", None) == 0 and ("int" in kind and "bool" not in kind):
            return int(value.item())
        shape = tuple(getattr(value, "shape", ()))
        raise TypeError(f"{name} must be an integer, got a {type(value).__name__} of dtype {kind} and shape {shape}")
    raise TypeError(f"{name} must be an integer, got {type(value).__name__} ({value!r})")


def check_int_range(name: str, value: int, low: int, high: int) -> int:
    """``value`` as an ``int`` (:func:`as_index`), or a :class:`UsageError` naming ``name`` and the inclusive range
    ``low..high`` it lies outside."""
    value = as_index(name, value)
    if not low <= value <= high:
        raise UsageError(name, f"{value} is out of range", f"allowed {low}..{high}")
    return value


def check_model(model, name: str = "model"):
    """``model`` if the toolkit analyses it (a TransformerLens model, as :func:`gpt2_posheads.load_model` returns, or a
    traced model), else a ``TypeError`` saying how to load one (a Hugging Face model, which has no ``cfg``, named)."""
    cfg = getattr(model, "cfg", None)
    if isinstance(getattr(cfg, "n_layers", None), int) and isinstance(getattr(cfg, "n_heads", None), int):
        return model
    hf = next((c.__name__ for c in type(model).__mro__ if c.__module__.startswith("transformers.")), None)
    if hf is not None or hasattr(model, "config"):
        raise TypeError(
            f"{name}: a Hugging Face {type(model).__name__} is not a TransformerLens model; load it with "
            "gpt2_posheads.load_model(<hub name or local folder>), e.g. load_model('gpt2') or "
            "load_model('path/to/saved_model') after model.save_pretrained('path/to/saved_model')"
        )
    raise TypeError(
        f"{name}: must be a TransformerLens HookedTransformer or TransformerBridge (gpt2_posheads.load_model returns "
        f"one), got {type(model).__name__}"
    )


def check_layer(model, layer: int, name: str = "layer", allow_final: bool = False) -> int:
    """A block index ``0..n_layers-1`` (``n_layers``, the final residual, with ``allow_final``) as an ``int``
    (:func:`check_int_range`)."""
    n = check_model(model).cfg.n_layers
    return check_int_range(name, layer, 0, n if allow_final else n - 1)


def check_layers(model, layers: Iterable[int], name: str = "layers") -> list[int]:
    if not _listlike(layers):
        raise TypeError(f"{name} must be a sequence of layer indices, got {type(layers).__name__} ({layers!r})")
    return [check_layer(model, x, f"{name} entry") for x in layers]


def check_head(model, layer: int, head: int) -> tuple[int, int]:
    layer = check_layer(model, layer)
    return layer, check_int_range("head", head, 0, model.cfg.n_heads - 1)


def check_heads(model, heads, name: str = "heads") -> list[tuple[int, int]]:
    """Heads (names ``"L4H11"`` or ``(layer, head)`` pairs, or one head alone) as ``[(layer, head), ...]`` within
    ``model``; an empty or malformed list is a ``ValueError``/``TypeError`` naming ``name``."""
    if isinstance(heads, str) or (isinstance(heads, tuple) and len(heads) == 2 and not isinstance(heads[0], Iterable)):
        heads = [heads]  # one head given alone
    if not isinstance(heads, Iterable):
        raise TypeError(f"{name} must be a list of heads ('L4H11' or (4, 11)), got {type(heads).__name__}")
    out = []
    for spec in heads:
        if isinstance(spec, str):
            out.append(parse_head(spec, model))
        elif isinstance(spec, (tuple, list)) and len(spec) == 2:
            out.append(check_head(model, spec[0], spec[1]))
        else:
            raise TypeError(f"{name}: {spec!r} is not a head; give 'L4H11' or (4, 11)")
    if not out:
        raise UsageError(name, "is empty", "at least one head, e.g. ['L4H11']")
    return out


def parse_head(spec, model=None) -> tuple[int, int]:
    """``"L4H11"`` or ``(4, 11)`` → ``(4, 11)``; checked against ``model`` when given."""
    if isinstance(spec, str):
        m = HEAD_NAME.match(spec.strip().upper())
        if not m:
            hint = "or use auto:N for the model's N most previous-token-like heads"
            raise UsageError(
                "head", f"{spec!r} is not a head name", "names look like L<layer>H<head>, e.g. L4H11", hint
            )
        layer, head = int(m.group(1)), int(m.group(2))
    else:
        layer, head = (as_index("head", x) for x in spec)
    if model is not None and not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads):
        allowed = f"this model has layers 0..{model.cfg.n_layers - 1} and heads 0..{model.cfg.n_heads - 1}"
        raise UsageError("head", f"unknown head {head_name(layer, head)}", allowed)
    return layer, head


def head_name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def path_kind(path) -> str:
    """What ``path`` is, in words a user reads: ``"folder"``, ``"file"``, ``"missing"``, or what else (a symlink loop,
    a broken link, a device, a FIFO, a socket, unreadable). Never raises: an option gets one line saying so."""
    import os
    import stat

    p = os.fspath(os.path.expanduser(os.fspath(path)))
    try:
        st = os.stat(p)
    except OSError as e:
        if e.errno == errno.ENOENT and os.path.islink(p):
            return f"a broken symbolic link (to {os.readlink(p)})"
        # ENOTDIR: a part of the path is a file
        words = {errno.ELOOP: "a symbolic link loop", errno.ENOENT: "missing", errno.ENOTDIR: "missing"}
        words[errno.ENAMETOOLONG] = "a name too long for this file system"
        return words.get(e.errno, f"not accessible ({e.strerror})")
    except ValueError:  # a NUL character in the path
        return "not a valid path (it holds a NUL character)"
    kinds = {stat.S_ISDIR: "folder", stat.S_ISREG: "file", stat.S_ISCHR: "a character device"}
    kinds |= {stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISSOCK: "a socket"}
    return next((what for test, what in kinds.items() if test(st.st_mode)), "neither a file nor a folder")


def check_learned_pos_embed(model) -> None:
    """Extended positional embeddings and ``W_pos`` interventions need learned absolute positions."""
    kind = getattr(model.cfg, "positional_embedding_type", "standard")
    if kind != "standard" or getattr(model, "W_pos", None) is None:
        need = (
            "this analysis needs learned absolute positional embeddings (cfg.positional_embedding_type == 'standard')"
        )
        raise UsageError("model", f"has {kind!r} positional embeddings", need)


INT64 = (-(1 << 63), (1 << 63) - 1)  # what torch and NumPy take as one integer


def positive(name: str, value, low: float = 1, high: float | None = None, kind: str = "an integer"):
    """``value`` unless it lies outside ``low..high`` (a :class:`UsageError` naming ``name`` and that range; an integer
    past int64, what torch takes, is outside every range)."""
    if value is None:
        return None
    if isinstance(value, int) and value > INT64[1] and (high is None or high > INT64[1]):
        raise UsageError(name, f"{value} is out of range", f"allowed {low:g}..{INT64[1]} (what torch takes)")
    finite = isinstance(value, (int, float)) and math.isfinite(value)
    if not finite or value < low or (high is not None and value > high):
        allowed = f"allowed {low:g}..{high:g}" if high is not None else f"allowed {kind} >= {low:g}"
        raise UsageError(name, f"{value} is out of range", allowed)
    return value


# --- the public functions' arguments, checked by name before any work (:func:`checked`, or
# ``state.measures_caller_model`` for what measures): a wrong type is a ``TypeError``, a value out of range a
# UsageError, each naming the argument. What needs the model (a layer's range, the heads) the function checks.


def _integer(low: int):
    return lambda name, value, bound: positive(name, as_index(name, value), low)


def _kind(ok, what: str):
    """A check that ``ok(value)``, else a ``TypeError``: ``<name> must be <what>, got <type> (<value>)``."""

    def check(name, value, bound):
        if not ok(value):
            raise TypeError(f"{name} must be {what}, got {type(value).__name__} ({value!r})")

    return check


def _listlike(v) -> bool:
    return isinstance(v, Iterable) and not isinstance(v, (str, bytes))


def _sequence_of(item, what: str):
    whole = _kind(_listlike, f"a sequence of {what}")

    def check(name, value, bound):
        whole(name, value, bound)
        for x in value:
            item(f"{name} entry", x, bound)

    return check


def _model(name, value, bound):
    if not (hasattr(value, "diagonals") and hasattr(value, "ext_pos")):  # stored activations stand in for a model
        check_model(value, name)


_flag = _kind(lambda v: isinstance(v, bool) or str(getattr(v, "dtype", "")) == "bool", "True or False")
_real = _kind(lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v), "a finite number")
_text = _kind(lambda v: isinstance(v, str), "a string")
_tokens = _kind(  # None: stored activations fix their prompts; a function that needs them says so
    lambda v: v is None or _listlike(v),
    "token ids [batch, pos] (gpt2_posheads.make_prompts makes them), a list of token tensors or of strings",
)
_heads = _kind(lambda v: isinstance(v, (str, Iterable)), "head names ('L4H11'), (layer, head) pairs or 'auto:N'")
_run = _kind(
    lambda v: all(hasattr(v, a) for a in ("model", "prompts", "ranked")),
    "a ModelRun (gpt2_posheads.posts.gpt2_prev_heads.model_run(model) makes one)",
)
_tokenizer = _kind(
    lambda v: callable(v) and hasattr(v, "decode"),
    "a Hugging Face tokenizer (model.tokenizer, gpt2_posheads.gpt2_tokenizer())",
)


def _engine(name, value, bound):
    _text(name, value, bound)
    model, run = bound.arguments.get("model"), bound.arguments.get("run")
    if value == "fast":
        check_fast_engine(model if model is not None else getattr(run, "model", None), name)


def check_fast_engine(model, name: str = "engine") -> None:
    """A :class:`UsageError` naming ``name`` when the hook-free fast path cannot run ``model`` at all (said before any
    work)."""
    import torch

    if isinstance(model, torch.nn.Module):
        from .engine_fast import unsupported_reason

        why = unsupported_reason(model)
        if why is not None:
            raise UsageError(
                name, f"'fast' cannot run this model: {why}", "allowed 'auto' (the fast path where it can) or 'hooks'"
            )


_COUNT = _integer(1)
ARGUMENT_CHECKS = {
    "model": _model,
    "tokenizer": _tokenizer,
    "prompts": _tokens,
    "tokens": _tokens,
    "heads": _heads,
    "run": _run,
    "engine": _engine,
    **dict.fromkeys(("n_prompts", "batch_size", "n_seqs", "seg_len", "window", "group_size", "every"), _COUNT),
    **dict.fromkeys(("pos_group", "size", "k", "ext_prompts", "n_token_dependence"), _COUNT),
    **dict.fromkeys(("seq_len", "max_offset", "lr_steps", "three_layer_steps"), _COUNT),
    **dict.fromkeys(("seed", "start", "skip_first"), _integer(0)),
    # a layer's or a head's range is the model's, checked by the function against it
    **dict.fromkeys(("layer", "head"), _index := lambda name, value, bound: as_index(name, value)),
    "layers": _sequence_of(_index, "layer indices"),
    "group_sizes": _sequence_of(_COUNT, "group sizes"),
    "vocab": _sequence_of(_COUNT, "vocabulary sizes"),
    "factors": _sequence_of(_real, "numbers"),
    "targets": _sequence_of(_text, "strings"),
    **dict.fromkeys(("threshold", "factor"), _real),
    **dict.fromkeys(("label", "target", "ablation", "protocol"), _text),
    **dict.fromkeys(
        ("progress", "bf16", "exclude_bos", "include_bos", "renormalize", "return_per_token", "prepend_bos", "below"),
        _flag,
    ),
}


def check_arguments(bound) -> None:
    """Check each argument of ``bound`` (``inspect.BoundArguments``, ``**options`` included) that
    :data:`ARGUMENT_CHECKS` knows by name, ``model`` first; ``None`` passes where it is the default."""
    params, given = bound.signature.parameters, {}
    for name, value in bound.arguments.items():
        given.update(value if params[name].kind is params[name].VAR_KEYWORD else {name: value})
    for name in sorted(given, key=lambda n: n != "model"):
        check, value, p = ARGUMENT_CHECKS.get(name), given[name], params.get(name)
        if check is not None and not (value is None and (p is None or p.default is None)):
            check(name, value, bound)


def checked_call(signature: inspect.Signature, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
    """``args`` and ``kwargs`` bound to ``signature`` and checked; ``None`` when they do not bind (the function then
    says so, as Python does)."""
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        return None
    check_arguments(bound)
    return bound


def checked(fn):
    """``fn`` with its arguments checked (:func:`check_arguments`) before it runs."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        checked_call(signature, args, kwargs)
        return fn(*args, **kwargs)

    return wrapper

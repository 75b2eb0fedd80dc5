"""Argument checks shared by every analysis: each error names the parameter and its allowed range."""

from __future__ import annotations

import re
from collections.abc import Iterable

HEAD_NAME = re.compile(r"^L(\d+)H(\d+)$")


class UsageError(ValueError):
    """A caller's mistake, told in one line: ``<parameter>: <what is wrong>; <allowed>; <hint>``.

    Scripts print it as ``error: ...`` and exit with status 2, without a traceback; library callers
    get an ordinary ``ValueError``.
    """

    def __init__(self, param: str, problem: str, allowed: str = "", hint: str = ""):
        self.param, self.problem, self.allowed, self.hint = param, problem, allowed, hint
        super().__init__("; ".join(x for x in (f"{param}: {problem}", allowed, hint) if x))


class NonFiniteError(RuntimeError):
    """An analysis met a NaN or infinite number in what the model computed (a pattern, a logit, a residual): no
    claim resting on it can be judged. Scripts end with every claim ``not testable`` and this message."""


def require_finite(x, what: str):
    """``x`` (a tensor or a float) unchanged, or :class:`NonFiniteError` saying ``what`` was not finite."""
    import torch

    t = torch.as_tensor(x)
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        n = int((~torch.isfinite(t)).sum())
        raise NonFiniteError(f"{what} is not finite ({n:,} NaN or infinite values of {t.numel():,})")
    return x


def check_int_range(name: str, value: int, low: int, high: int) -> int:
    """Raise ``ValueError`` unless ``low <= value <= high`` (inclusive)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if not low <= value <= high:
        raise UsageError(name, f"{value} is out of range", f"allowed {low}..{high}")
    return value


def check_layer(model, layer: int, name: str = "layer", allow_final: bool = False) -> int:
    """A block index ``0..n_layers-1`` (or ``n_layers`` = the final residual when ``allow_final``)."""
    n = model.cfg.n_layers
    return check_int_range(name, layer, 0, n if allow_final else n - 1)


def check_layers(model, layers: Iterable[int], name: str = "layers") -> list[int]:
    layers = [int(x) for x in layers]
    for x in layers:
        check_int_range(f"{name} entry", x, 0, model.cfg.n_layers - 1)
    return layers


def check_head(model, layer: int, head: int) -> tuple[int, int]:
    check_layer(model, layer)
    check_int_range("head", head, 0, model.cfg.n_heads - 1)
    return layer, head


def parse_head(spec, model=None) -> tuple[int, int]:
    """``"L4H11"`` or ``(4, 11)`` → ``(4, 11)``; checked against ``model`` when given."""
    if isinstance(spec, str):
        m = HEAD_NAME.match(spec.strip().upper())
        if not m:
            raise UsageError(
                "head",
                f"{spec!r} is not a head name",
                "names look like L<layer>H<head>, e.g. L4H11",
                "or use auto:N for the model's N most previous-token-like heads",
            )
        layer, head = int(m.group(1)), int(m.group(2))
    else:
        layer, head = (int(x) for x in spec)
    if model is not None and not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads):
        raise UsageError(
            "head",
            f"unknown head {head_name(layer, head)}",
            f"this model has layers 0..{model.cfg.n_layers - 1} and heads 0..{model.cfg.n_heads - 1}",
        )
    return layer, head


def head_name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def check_seq_len(model, seq_len: int, name: str = "seq_len") -> int:
    return check_int_range(name, seq_len, 1, model.cfg.n_ctx)


def check_learned_pos_embed(model) -> None:
    """Extended positional embeddings and ``W_pos`` interventions need learned absolute positions."""
    kind = getattr(model.cfg, "positional_embedding_type", "standard")
    if kind != "standard" or getattr(model, "W_pos", None) is None:
        raise UsageError(
            "model",
            f"has {kind!r} positional embeddings",
            "this analysis needs learned absolute positional embeddings (cfg.positional_embedding_type == 'standard')",
        )

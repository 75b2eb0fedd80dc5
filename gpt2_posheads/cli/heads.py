"""``--heads``: the option that names the heads a script measures (:mod:`gpt2_posheads.analysis.heads` resolves it)."""

from __future__ import annotations

import argparse

from ..analysis.heads import HeadDefault, HeadSpec, require_above_layer0, resolve_heads

__all__ = ["HeadDefault", "HeadSpec", "add_heads_arg", "require_above_layer0", "resolve_heads"]


def add_heads_arg(p: argparse.ArgumentParser, default: HeadDefault) -> None:
    p.add_argument("--heads", default=None, help=default.help())

"""The posts this toolkit reproduces, one folder each named by its subject (the GPT-2 post's
:mod:`~gpt2_posheads.posts.gpt2_prev_heads`, whose claims are functions of a model and prompts; the toy sparse-attention
posts, which train their own models), every claim a function returning a
:class:`~gpt2_posheads.posts.result.ClaimResult`. A claim's module holds its three parts side by side: *measure* (the
numbers), *judge* (the post's rules, :mod:`gpt2_posheads.claims`, applied to them) and *figure*::

    from gpt2_posheads import load_model, posts
    model = load_model("route-gpt2")
    result = posts.gpt2_prev_heads.mask_prev_attention(model, heads=["L2H0"])
    result.verdicts()          # verdict, number, rule and reason per claim
    result.show()              # the figures
"""

import importlib
import os
import sys

from ..claims.catalogue import PLUGINS_ENV
from . import gpt2_prev_heads, lost_in_middle, prev_token_toy, similar_content, sticky_plateau
from .result import ClaimResult

PLUGIN_ERRORS: list[str] = []  # the modules of $GPT2_POSHEADS_POSTS that could not be imported, each in one line


def import_plugins() -> None:
    """Import the researcher's own modules of declared claims named in ``$GPT2_POSHEADS_POSTS`` (comma-separated
    module names, importable from ``sys.path`` or the current folder): their declarations join the catalogue like the
    posts' own. A module that cannot be imported leaves the package usable and is listed in :data:`PLUGIN_ERRORS`
    (said as one ``error:`` line). Called once the package is whole, so that such a module may import any public name
    of ``gpt2_posheads``."""
    names = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    if names and os.getcwd() not in sys.path:  # the console script's path starts at its bin folder, not here
        sys.path.append(os.getcwd())
    for name in names:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # whatever the module raises, said in one line naming it
            PLUGIN_ERRORS.append(f"{name!r} cannot be imported ({type(e).__name__}: {e})")


__all__ = ["ClaimResult", "gpt2_prev_heads", "lost_in_middle", "prev_token_toy", "similar_content", "sticky_plateau"]

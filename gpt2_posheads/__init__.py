# ruff: noqa: F401 - the names imported here are the public face (__all__ lists them)
"""gpt2_posheads: positional information and previous-token heads, in GPT-2, in other transformers and in toy models.

The package is layered: ``model`` < ``analysis`` < ``store`` < ``claims`` < ``report`` < ``organism`` < ``toy`` <
``posts`` < ``cli`` < ``commands``; each imports only those before it (docs/architecture.md says what each holds).
Every claim is a function of ``posts`` returning its numbers, verdicts and figures
(``posts.gpt2_prev_heads.mask_prev_attention(model)``), and a command (``gpt2-posheads NAME``).

The names below are the public face; everything is also importable from its module.
"""

import types as _types

from . import posts  # the posts' declarations fill the catalogue of claims (claims.catalogue)
from .analysis.atlas import head_table, ood_composition_scores
from .analysis.diagonals import (
    choose_aggregator,
    count_prev_heads,
    diagonal_attention,
    prev_token_ranking,
    prev_token_stats,
    rank_from_diagonals,
)
from .analysis.induction import induction_scores
from .analysis.interventions import (
    average_ext_pos_embed,
    average_pos_embed,
    edit_head_pattern,
    hooks_for,
    mask_previous_attention,
    scale_head_output,
)
from .analysis.posembed import extended_pos_embeddings, extended_pos_embeddings_by_layer, load_w_pos
from .analysis.prompts import make_prompts
from .analysis.scores import attention_scores, classify_prev_heads, score_profile
from .analysis.sources import composition_scores, path_ablation
from .claims.catalogue import Option, Post, declare, register_post
from .claims.verdicts import at_least, at_most, declare_claim, judge, predicate
from .model.loading import (
    ModelLoadError,
    gpt2_tokenizer,
    hub_reachable,
    is_gpt2_small,
    load_model,
    make_random_model_dir,
    position_kind,
)
from .model.paths import register_builder_loader as _register_builder_loader
from .model.validation import UsageError
from .posts.gpt2_prev_heads import prompted_run
from .posts.result import ClaimResult


def _load_compiler() -> None:
    from .model.paths import register_builder
    from .organism import compiled

    register_builder(compiled.build, compiled.check_folder, compiled.FOLDER_FILES)


_register_builder_loader(_load_compiler)

# Loaded on first use, so that `import gpt2_posheads` loads what a claim needs and not the organism's training,
# the explorer (plotly pages) or the activation store: name -> (module, attribute).
_LAZY = {
    "Explorer": ("report.explorer", "Explorer"),
    "explore": ("report.explorer", "explore"),
    "write_explorer": ("report.explorer", "write_explorer"),
    "PosheadsCache": ("store.cache", "PosheadsCache"),
}
# Names that moved: a user's script keeps working and is told the new name: old -> (module, new name).
_MOVED = {"rank_prev_heads": ("analysis.diagonals", "prev_token_ranking")}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    if name in _MOVED:
        import warnings

        module, new = _MOVED[name]
        warnings.warn(
            f"gpt2_posheads.{name} is now gpt2_posheads.{new} (the claim of that name is "
            f"gpt2_posheads.posts.gpt2_prev_heads.{name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"{__name__}.{module}"), new)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the public face: every name imported above (the posts' module among them) and those loaded on first use
__all__ = ["posts", *(n for n, v in globals().items() if n[0] != "_" and not isinstance(v, _types.ModuleType)), *_LAZY]
__version__ = "0.3.0"

posts.import_plugins()  # last: a researcher's module of claims ($GPT2_POSHEADS_POSTS) may import any name above

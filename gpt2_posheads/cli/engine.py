"""``--engine nnsight`` and ``--remote``: the options of the scripts that run through nnsight, locally or on NDIF.

``--remote`` is checked before any work (:func:`check_engine_args`): it needs ``--engine nnsight``, nnsight itself,
``NDIF_API_KEY`` and a connection to NDIF within a few seconds; each failure is one ``error: --remote: ...`` line.
"""

from __future__ import annotations

from ..claims.catalogue import Option
from ..model.engine_nnsight import ENGINE as NNSIGHT
from ..model.engine_nnsight import check_remote, load_traced, require_nnsight
from ..model.validation import UsageError


def engine_options(engines: tuple[str, ...], help: str) -> tuple[Option, ...]:
    """``--engine`` (``engines`` and nnsight) and ``--remote``."""
    return (
        Option(
            "--engine",
            "auto",
            help + "; nnsight: every pattern computed and reduced inside an nnsight trace (a local Hugging Face "
            "folder, or an NDIF-hosted model with --remote)",
            choices=(*engines, NNSIGHT),
        ),
        Option(
            "--remote",
            False,
            "run the nnsight traces on NDIF (needs --engine nnsight, NDIF_API_KEY and a hub name in --model/--models)",
        ),
    )


def check_engine_args(args, model_dir_flag: str = "--model-dir") -> None:
    """``--remote`` needs ``--engine nnsight``, a hub name rather than a local folder, and NDIF (checked now,
    within seconds); a local nnsight run needs nnsight installed."""
    if not getattr(args, "remote", False):
        if getattr(args, "engine", None) == NNSIGHT:
            require_nnsight("--engine", "or --engine auto")
        return
    if getattr(args, "engine", None) != NNSIGHT:
        raise UsageError("--remote", "needs --engine nnsight", "--engine nnsight --remote", "or drop --remote")
    if getattr(args, model_dir_flag.lstrip("-").replace("-", "_"), None):
        raise UsageError(
            "--remote",
            f"runs a model hosted on NDIF, named by its hub id, not a local folder ({model_dir_flag})",
            "--model <hub id> --remote",
            f"or drop --remote to run {model_dir_flag} through nnsight here",
        )
    check_remote("--remote")


def load_engine_model(name: str, args, param: str = "--model"):
    """The model a script measures: a :class:`~gpt2_posheads.model.engine_nnsight.TracedModel` with ``--engine nnsight``
    (hosted on NDIF with ``--remote``), else ``None`` (the caller loads its TransformerLens model)."""
    if getattr(args, "engine", None) != NNSIGHT:
        return None
    try:
        return load_traced(name, remote=bool(getattr(args, "remote", False)), device=getattr(args, "device", None))
    except (OSError, ValueError) as e:
        if isinstance(e, UsageError):
            raise
        raise UsageError(param, f"{name} could not be loaded through nnsight ({type(e).__name__}: {e})") from None

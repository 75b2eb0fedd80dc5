"""Which TransformerLens hooks a model really fires, and which of them change its output when edited.

A hook name in ``model.hook_dict`` is no promise. On the TransformerLens 4 bridge (measured with TL 4.3 on
random-weight models): Pythia and Llama never fire ``hook_pos_embed`` (they have no ``W_pos``), Pythia lists
``hook_rot_q``/``hook_rot_k`` but never fires them, and GPT-Neo and OPT fire ``hook_pattern`` only *after* the
attention output is computed, so editing the pattern there changes nothing. An intervention that silently does
nothing would make a claim look "not held" when it was never tested, so every intervention asks
:func:`hook_status` first. The probe runs once per model (cached, reset when the weights change): one forward
of 8 tokens watching every hook of layer ``min(1, n_layers - 1)`` and the embeddings, and one more per hook
with that hook edited.
"""
from __future__ import annotations

import weakref
from typing import Literal

import torch

from .tokens import model_device

HookState = Literal["live", "dead", "never fires", "absent"]
PROBED = ("hook_pos_embed", "hook_embed", "hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v",
          "attn.hook_cos", "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z")
_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _full_name(model, suffix: str) -> str:
    layer = min(1, model.cfg.n_layers - 1)
    return suffix if suffix.startswith("hook_") and suffix != "hook_resid_pre" else f"blocks.{layer}.{suffix}"


def _params_key(model) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def hook_status(model) -> dict[str, HookState]:
    """``{suffix: state}`` for the hooks in :data:`PROBED` (block hooks as ``"attn.hook_pattern"``, checked on
    one block, the same code in every block): ``live`` (editing it changes the logits), ``dead`` (it fires, but
    editing it changes nothing), ``never fires`` or ``absent`` (not a hook of this model)."""
    key = _params_key(model)
    entry = _CACHE.get(model)
    if entry is not None and entry[0] == key:
        return entry[1]
    toks = torch.arange(1, 9, device=model_device(model))[None] % model.cfg.d_vocab
    names = {s: _full_name(model, s) for s in PROBED}
    present = {s: n for s, n in names.items() if n in getattr(model, "hook_dict", {})}
    fired: set[str] = set()
    with torch.inference_mode():
        clean = model.run_with_hooks(toks, fwd_hooks=[(n, (lambda s: lambda x, hook: fired.add(s))(s))
                                                      for s, n in present.items()])
        status: dict[str, HookState] = {}
        for s in PROBED:
            if s not in present:
                status[s] = "absent"
            elif s not in fired:
                status[s] = "never fires"
            else:
                def edit(x, hook):  # a change no model ignores: scale and shift every entry
                    return x * 0.5 + 0.1 if x.is_floating_point() else x
                out = model.run_with_hooks(toks, fwd_hooks=[(present[s], edit)])
                status[s] = "live" if float((out - clean).abs().max()) > 1e-6 else "dead"
    _CACHE[model] = (key, status)
    return status


def require_live(model, suffix: str, what: str) -> None:
    """Raise a one-line :class:`~gpt2_posheads.model.validation.UsageError` unless editing ``suffix`` changes the
    model's output (``what``: the intervention, for the message)."""
    from .validation import UsageError

    state = hook_status(model).get(suffix, "absent")
    if state != "live":
        raise UsageError("model", f"{what} has no effect on this model: its {suffix} {_WORDS[state]}",
                         "a model whose hook feeds its output", "the intervention would change nothing")


_WORDS = {"dead": "fires only after the output is computed", "never fires": "never fires",
          "absent": "does not exist", "live": "is live"}

"""Which TransformerLens hooks a model really fires, and which of them feed its computation when edited.

A hook name in ``model.hook_dict`` is no promise. On the TransformerLens 4 bridge (measured with TL 4.3 on
random-weight models): Pythia and Llama never fire ``hook_pos_embed`` (they have no ``W_pos``), Pythia lists
``hook_rot_q``/``hook_rot_k`` but never fires them, and GPT-Neo and OPT fire ``hook_pattern`` only *after* the
attention output is computed, so editing the pattern there changes nothing. An intervention that silently does
nothing would make a claim look "not held" when it was never tested, so every intervention asks
:func:`hook_status` first. The probe runs once per model (cached, reset when the weights change): one forward
of 8 tokens watching the hooks of block ``min(1, n_layers - 1)`` and the embeddings, then one per hook with it
edited, judged by the activation it feeds (:data:`DOWNSTREAM`): a verdict on the plumbing, not on the weights
(editing the residual must reach ``resid_post`` through the skip connection whatever the block computes). A block
hook that changes nothing there is probed in the other blocks too, since a block whose heads have zero value or
output weights (a hand-built model's inert layer) hides the plumbing: it is ``live`` if it feeds its activation in
any block.
"""

from __future__ import annotations

import weakref
from typing import Literal

import torch

from .tokens import model_device

HookState = Literal["live", "dead", "never fires", "absent"]
# each probed hook and the nearest activation that an edit of it must change
DOWNSTREAM = {
    "hook_pos_embed": "hook_resid_pre",
    "hook_embed": "hook_resid_pre",
    "hook_resid_pre": "hook_resid_post",
    "attn.hook_q": "attn.hook_pattern",
    "attn.hook_k": "attn.hook_pattern",
    "attn.hook_cos": "attn.hook_pattern",
    "attn.hook_v": "attn.hook_z",
    "attn.hook_attn_scores": "attn.hook_pattern",
    "attn.hook_pattern": "attn.hook_z",
    "attn.hook_z": "hook_attn_out",
}
PROBED = tuple(DOWNSTREAM)
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _name(model, suffix: str, embedding_block: bool = False, layer: int | None = None) -> str:
    if suffix in ("hook_pos_embed", "hook_embed"):
        return suffix
    if layer is None:
        layer = 0 if embedding_block else min(1, model.cfg.n_layers - 1)
    return f"blocks.{layer}.{suffix}"


def _params_key(model) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _watch(box: dict, name: str):
    def hook(x, hook):
        box[name] = x.detach().clone()

    return hook


def _edit(x, hook):
    """Scale and shift every entry: no plumbing that uses the value can ignore it."""
    return x * 0.5 + 0.1 if x.is_floating_point() else x


def hook_status(model) -> dict[str, HookState]:
    """``{suffix: state}`` for the hooks in :data:`PROBED` (block hooks as ``"attn.hook_pattern"``, checked on
    one block, the same code in every block): ``live`` (editing it changes the activation it feeds), ``dead``
    (it fires, but editing it changes nothing downstream), ``never fires`` or ``absent`` (not a hook of this model)."""
    key = _params_key(model)
    entry = _CACHE.get(model)
    if entry is not None and entry[0] == key:
        return entry[1]
    toks = torch.arange(1, 9, device=model_device(model))[None] % model.cfg.d_vocab
    hooks = getattr(model, "hook_dict", {})
    present = {s: _name(model, s) for s in PROBED if _name(model, s) in hooks}
    downstream = {
        s: _name(model, DOWNSTREAM[s], embedding_block=s in ("hook_pos_embed", "hook_embed")) for s in present
    }
    fired: set[str] = set()

    def note(suffix: str):
        def hook(x, hook):
            fired.add(suffix)

        return hook

    watched = sorted({n for n in downstream.values() if n in hooks})
    clean: dict[str, torch.Tensor] = {}
    status: dict[str, HookState] = {}
    with torch.inference_mode():
        model.run_with_hooks(
            toks,
            fwd_hooks=[(n, note(s)) for s, n in present.items()] + [(n, _watch(clean, n)) for n in watched],
            return_type=None,
        )
        for s in PROBED:
            if s not in present:
                status[s] = "absent"
            elif s not in fired:
                status[s] = "never fires"
            elif downstream[s] not in clean:
                status[s] = "live"  # nothing downstream to watch on this model: trust the hook
            else:
                status[s] = "live" if _feeds(model, toks, present[s], downstream[s], clean[downstream[s]]) else "dead"
                if status[s] == "dead" and s.startswith("attn."):  # inert heads in the probed block hide the plumbing
                    first = min(1, model.cfg.n_layers - 1)
                    for layer in (l for l in range(model.cfg.n_layers) if l != first):
                        here, there = _name(model, s, layer=layer), _name(model, DOWNSTREAM[s], layer=layer)
                        if here in hooks and there in hooks and _feeds(model, toks, here, there):
                            status[s] = "live"
                            break
    _CACHE[model] = (key, status)
    return status


def _feeds(model, toks: torch.Tensor, name: str, downstream: str, clean: torch.Tensor | None = None) -> bool:
    """Whether editing hook ``name`` changes the activation at ``downstream`` (``clean``: its unedited value)."""
    if clean is None:
        box: dict[str, torch.Tensor] = {}
        model.run_with_hooks(toks, fwd_hooks=[(downstream, _watch(box, downstream))], return_type=None)
        clean = box[downstream]
    after: dict[str, torch.Tensor] = {}
    model.run_with_hooks(toks, fwd_hooks=[(name, _edit), (downstream, _watch(after, downstream))], return_type=None)
    return float((after[downstream].float() - clean.float()).abs().max()) > 1e-6


def require_live(model, suffix: str, what: str) -> None:
    """Raise a one-line :class:`~gpt2_posheads.model.validation.UsageError` unless editing ``suffix`` changes what
    it feeds in this model (``what``: the intervention, for the message)."""
    from .validation import UsageError

    state = hook_status(model).get(suffix, "absent")
    if state != "live":
        raise UsageError(
            "model",
            f"{what} has no effect on this model: its {suffix} {_WORDS[state]}",
            "a model whose hook feeds its computation",
            "the intervention would change nothing",
        )


_WORDS = {
    "dead": "does not feed the activation after it (it fires after that is computed, or its weights ignore it)",
    "never fires": "never fires",
    "absent": "does not exist",
    "live": "is live",
}

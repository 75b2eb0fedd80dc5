"""Extended positional embeddings: what the residual stream at a layer says about position.

Feed prompts that repeat a single token: ``BOS t t ... t`` (as every prompt of this toolkit starts), or ``t t ... t``
on a model without a BOS token. At layer 0 the residual stream at a position ``p >= 1`` is ``W_E[t] + W_pos[p]``;
subtracting the mean over the repeated token's positions leaves ``W_pos[p] - mean W_pos``. At a later layer the same
recipe isolates the positional part of the residual stream as the earlier blocks have rewritten it: the *extended
positional embedding*. Averaging over several repeated tokens removes what little token dependence is left.

BOS matters: a model may count positions from it, and the embeddings are added to prompts that start with it, so
they are measured on prompts that start with it. Row 0 is then the BOS position, centred with the same mean; geometry
is measured on the repeated token's rows (:func:`token_rows`), and group averaging leaves row 0 alone.
"""

from __future__ import annotations

from pathlib import Path

import einops
import numpy as np
import torch

from ..model.engine import Reduction, engine_for
from ..model.state import measures_caller_model
from ..model.validation import (
    UsageError,
    as_index,
    check_int_range,
    check_layer,
    check_learned_pos_embed,
    require_finite,
)


def load_w_pos(source) -> torch.Tensor:
    """``W_pos`` ``[n_ctx, d_model]`` from a model (``model.W_pos``) or a ``.npy``/``.pt`` file."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if p.suffix not in (".npy", ".pt"):
            raise UsageError(
                "w_pos",
                f"{p} is not a .npy or .pt file",
                "allowed a .npy (numpy) or .pt (torch) file",
                "GPT-2's real one: ../shared/gpt2-small/W_pos.npy",
            )
        if not p.exists():
            raise UsageError("w_pos", f"{p} does not exist", "a .npy or .pt file of shape [n_ctx, d_model]")
        try:
            arr = np.load(p) if p.suffix == ".npy" else torch.load(p, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - any unreadable file is the user's to fix
            raise UsageError("w_pos", f"{p} could not be read ({type(e).__name__})", "a .npy or .pt matrix") from None
        w = torch.as_tensor(np.asarray(arr), dtype=torch.float32)
    else:
        check_learned_pos_embed(source)
        w = source.W_pos.detach().float().cpu()
    if w.ndim != 2:
        raise UsageError("w_pos", f"has shape {tuple(w.shape)}", "W_pos must be a [n_ctx, d_model] matrix")
    return w


def random_token_ids(model, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` distinct random token ids (special tokens avoided), reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    special = set(getattr(model.tokenizer, "all_special_ids", []) or []) if getattr(model, "tokenizer", None) else set()
    perm = torch.randperm(model.cfg.d_vocab, generator=gen)
    return torch.tensor([t for t in perm.tolist() if t not in special][:n])


def default_bos(model) -> bool:
    """Whether the toolkit's prompts start with BOS on ``model``: it has a tokenizer with a BOS token."""
    tok = getattr(model, "tokenizer", None)
    return tok is not None and getattr(tok, "bos_token_id", None) is not None


def token_rows(x: torch.Tensor, bos: bool) -> torch.Tensor:
    """The repeated token's rows (``1..`` after BOS) of ``[seq_len, d_model]``."""
    return x[int(bos) :]


@measures_caller_model
def extended_pos_embeddings(
    model,
    layer: int,
    tokens=None,
    n_prompts: int = 16,
    seq_len: int | None = None,
    batch_size: int = 4,
    seed: int = 0,
    return_per_token: bool = False,
    progress: bool = False,
    engine: str = "auto",
    bos: bool | None = None,
):
    """The extended positional embedding at ``layer`` ``[seq_len, d_model]`` (module doc): ``mean_t E_t``, ``E_t = R_t -
    mean R_t`` with ``R_t`` the residual stream entering block ``layer`` (``n_layers``: before ``ln_final``) on ``BOS``
    then ``t`` repeated to ``seq_len`` tokens (default ``n_ctx``; no BOS with ``bos=False``), the mean over the
    repeated token's positions, ``t`` over ``tokens`` or ``n_prompts`` random ids from ``seed``. ``return_per_token``:
    also the stack ``[n_tokens, seq_len, d_model]`` (not through nnsight). ``model`` may be stored activations holding
    the layer: the stored matrix re-centred over the first ``seq_len`` positions (what the store did not fix when built
    is an error)."""
    layer = as_index("layer", layer)  # a bool, a float or a string is not a layer (its range: the engine's model)
    res = extended_pos_embeddings_by_layer(
        model, [layer], tokens, n_prompts, seq_len, batch_size, seed, return_per_token, progress, engine, bos
    )
    return (res[0][layer], res[1][layer]) if return_per_token else res[layer]


@measures_caller_model
def extended_pos_embeddings_by_layer(
    model,
    layers,
    tokens=None,
    n_prompts: int = 16,
    seq_len: int | None = None,
    batch_size: int = 4,
    seed: int = 0,
    return_per_token: bool = False,
    progress: bool = False,
    engine: str = "auto",
    bos: bool | None = None,
):
    """:func:`extended_pos_embeddings` at several layers from one pass: ``{layer: [seq_len, d_model]}`` (and ``{layer:
    [n_tokens, seq_len, d_model]}`` with ``return_per_token``). On a model without ``W_pos`` layer 0 is zeros."""
    layers = sorted({as_index("layer", l) for l in layers})
    if not layers:
        raise ValueError("layers is empty: pass at least one layer")
    eng = engine_for(model, engine)  # names a model that is neither TransformerLens, traced nor stored
    state: dict = {"per_token": return_per_token}

    def batches() -> list[torch.Tensor]:  # only an engine that runs a model makes them
        for l in layers:
            check_layer(model, l, allow_final=True)
        n = model.cfg.n_ctx if seq_len is None else seq_len
        check_int_range("seq_len", n, 2, model.cfg.n_ctx)
        b = default_bos(model) if bos is None else bool(bos)
        if b and not default_bos(model):
            raise ValueError("bos=True needs a model whose tokenizer has a BOS token")
        if tokens is None:
            check_int_range("n_prompts", n_prompts, 1, model.cfg.d_vocab)
        toks = random_token_ids(model, n_prompts, seed) if tokens is None else tokens
        toks = torch.as_tensor(toks, dtype=torch.long).flatten()
        if toks.numel() == 0:
            raise ValueError("tokens is empty: pass at least one token id")
        if int(toks.max()) >= model.cfg.d_vocab or int(toks.min()) < 0:
            raise ValueError(f"token ids must lie in 0..{model.cfg.d_vocab - 1}")
        out = []
        for i in range(0, len(toks), batch_size):
            prompts = einops.repeat(toks[i : i + batch_size], "b -> b pos", pos=n).clone()
            if b:
                prompts[:, 0] = model.tokenizer.bos_token_id
            out.append(prompts)
        state.update(bos=int(b), n=len(toks))
        return out

    def reader(store) -> dict:
        meta = getattr(store, "meta", {}) or {}
        # (given, this function's default, what the store was built with): a value other than both is refused
        fixed = {
            "tokens": (tokens, None, None),
            "return_per_token": (return_per_token, False, False),
            "n_prompts": (n_prompts, 16, meta.get("ext_n_prompts")),
            "seed": (seed, 0, meta.get("seed")),
            "bos": (bos, None, meta.get("ext_bos")),
        }
        wrong = [k for k, (got, default, kept) in fixed.items() if got is not default and got not in (default, kept)]
        if wrong:
            raise ValueError(
                f"stored activations fix {', '.join(wrong)} (built with n_prompts={meta.get('ext_n_prompts')}, "
                f"seed={meta.get('seed')}, bos={meta.get('ext_bos')}): call extended_pos_embeddings(store, layer"
                "[, seq_len]) or pass the model instead"
            )
        out = {}
        for layer in layers:
            stored = store.ext_pos(layer)
            if seq_len is not None:
                check_int_range("seq_len", seq_len, 2, stored.shape[0])
                # causal attention: the first seq_len positions of a longer repeated-token prompt are the residuals
                # of a seq_len-token prompt; only the centring differs, so centre again over those positions
                b = int(bool(meta.get("ext_bos", False)))
                stored = stored[:seq_len] - stored[b:seq_len].mean(0)
            out[f"L{layer}"] = stored
        return out

    bulk = "every prompt's embedding (return_per_token)" if return_per_token else ""
    reduction = Reduction(_ext_step, _ext_finish, state, stored=reader, bulk=bulk)
    res = eng.residuals(batches, layers, reduction, progress="extended pos emb" if progress else None)
    ext = {l: require_finite(res[f"L{l}"], f"the residual stream at layer {l}") for l in layers}
    if return_per_token:
        return ext, {l: res[f"per_token.L{l}"] for l in layers}
    return ext


def _ext_step(state: dict, layer: int, resid: torch.Tensor) -> None:
    """One batch's residuals ``[batch, pos, d_model]``, each centred over the repeated token's positions, summed into
    ``state[layer]`` ``[pos, d_model]`` (and kept per prompt with ``state["per_token"]``)."""
    r = resid.float()
    centred = r - r[:, state["bos"] :].mean(dim=1, keepdim=True)
    if layer not in state:
        state[layer] = torch.zeros(centred.shape[1:], dtype=torch.float64, device=centred.device)
    state[layer] += centred.sum(0).double()
    if state["per_token"]:
        state.setdefault(f"per_token.L{layer}", []).append(centred.cpu())


def _ext_finish(state: dict) -> dict:  # {"L{layer}": the mean}, and the per-token stacks
    out = {f"L{l}": (t.cpu() / state["n"]).float() for l, t in state.items() if isinstance(l, int)}
    out.update({k: torch.cat(v) for k, v in state.items() if isinstance(k, str) and k.startswith("per_token.")})
    return out


def centred_w_pos(w_pos: torch.Tensor, seq_len: int | None = None, bos: bool = False) -> torch.Tensor:
    """``W_pos[:seq_len]`` minus the mean of its rows ``1..`` with ``bos``: the layer-0 extended embedding."""
    w = w_pos[:seq_len] if seq_len else w_pos
    return w - w[int(bos) :].mean(0)

"""The nnsight engine: a Hugging Face causal LM under nnsight (:class:`TracedModel`), run here or on NDIF, one trace per
call of an analysis, its reductions and edits running where the model runs.

``nnsight`` is imported only here, when a traced model is made (importing it patches ``torch``). Remote runs need
``NDIF_API_KEY``; :func:`check_remote` says so in one line, bounding the connection attempt to seconds, before any work.

Each layer's pattern is computed inside the trace from the model's own query and key projections (:func:`layer_qkv`,
where :data:`ARCHS` says each architecture keeps them) and reduced on the spot, so only small tensors come back from
NDIF, never a pattern (the block of :func:`run_traced` is what nnsight ships, the functions it calls by value, so this
package need not be installed there). Scores are ``q . k * scale`` with rotary models rotated with the model's own
``cos``/``sin`` (the output of its ``rotary_emb``), grouped-query keys expanded per query head, the scale the module
itself uses (its ``scaling``; GPT-Neo, which does not scale, ``1``), the causal mask plus GPT-Neo's local window or a
declared sliding window: a hosted model need not run eager attention. *Verified, not trusted*: on the first batch of
every pass the trace also forms ``A v`` and compares it with the input of the attention's output projection; a gap
past tolerance is an error."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from .engine import NNSIGHT as ENGINE
from .engine import Edit, Engine, attention_pattern, expand_kv, materialise, replace_positions, rotate, z_gap
from .validation import UsageError

REMOTE_TIMEOUT_S = 3.0


# --- architectures: where each model keeps what the scores use ------------------------------------------------
@dataclass(frozen=True)
class Arch:
    """Module paths (in the Hugging Face model) of one architecture. ``qkv``: ``"split"`` (one fused projection,
    ``[q | k | v]`` along features: GPT-2), ``"heads"`` (``[q k v]`` within each head: GPT-NeoX), or ``"separate"``."""

    layers: str
    attn: str  # inside a layer
    qkv: str
    proj: tuple[str, ...]  # the fused projection, or the q, k, v projections, inside attn
    out: str  # the output projection inside attn: its input is the head outputs z
    embed: str
    final_norm: str
    pos_embed: str | None = None  # learned absolute positions
    pos_offset: int = 0  # OPT's position embedding starts at row 2
    rotary: str | None = None  # the model-level rotary module, whose output is (cos, sin)
    scaled: bool = True  # False: the model does not scale its scores (GPT-Neo)
    norm: str = "LN"
    attn_norm: str | None = None  # the norm in front of the attention, inside a layer


def _arch(paths: str, **options) -> Arch:
    """An :class:`Arch` from its first seven fields in order, space-separated (the projections joined by ``+``)."""
    layers, attn, qkv, proj, out, embed, final_norm = paths.split()
    return Arch(layers, attn, qkv, tuple(proj.split("+")), out, embed, final_norm, **options)


_QKV = "separate q_proj+k_proj+v_proj"
_LLAMA = _arch(
    f"model.layers self_attn {_QKV} o_proj model.embed_tokens model.norm",
    rotary="model.rotary_emb",
    norm="RMS",
    attn_norm="input_layernorm",
)
_GPT2 = dict(pos_embed="transformer.wpe", attn_norm="ln_1")
ARCHS: dict[str, Arch] = {
    "gpt2": _arch("transformer.h attn split c_attn c_proj transformer.wte transformer.ln_f", **_GPT2),
    "gpt_neo": _arch(
        f"transformer.h attn.attention {_QKV} out_proj transformer.wte transformer.ln_f", **_GPT2, scaled=False
    ),
    "opt": _arch(
        f"model.decoder.layers self_attn {_QKV} out_proj model.decoder.embed_tokens model.decoder.final_layer_norm",
        pos_embed="model.decoder.embed_positions",
        pos_offset=2,
        attn_norm="self_attn_layer_norm",
    ),
    "gpt_neox": _arch(
        "gpt_neox.layers attention heads query_key_value dense gpt_neox.embed_in gpt_neox.final_layer_norm",
        rotary="gpt_neox.rotary_emb",
        attn_norm="input_layernorm",
    ),
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
}


def arch_of(config) -> Arch:
    """The :class:`Arch` of a Hugging Face ``config`` (by ``model_type``); a one-line error for any other."""
    kind = getattr(config, "model_type", None)
    if kind not in ARCHS:
        why = f"nnsight engine does not know where {kind!r} models keep their queries and keys"
        allowed = f"allowed model types {', '.join(sorted(ARCHS))}"
        raise UsageError("--engine", why, allowed, "use the TransformerLens engine for this model")
    return ARCHS[kind]


def _windows(config, arch: Arch, n_layers: int) -> tuple[int | None, ...]:
    """Per layer, the query-key distance from which keys are masked (``None``: causal only)."""
    if getattr(config, "model_type", None) == "gpt_neo":
        kinds = list(getattr(config, "attention_layers", []) or [])
        w = int(config.window_size)
        return tuple(w if i < len(kinds) and kinds[i] == "local" else None for i in range(n_layers))
    sliding, types = getattr(config, "sliding_window", None), getattr(config, "layer_types", None)
    if not (sliding and getattr(config, "use_sliding_window", True)):
        return (None,) * n_layers
    return tuple(int(sliding) if types is None or types[i] == "sliding_attention" else None for i in range(n_layers))


# --- the traced model -------------------------------------------------------------------------------------------
@dataclass
class TracedModel:
    """An nnsight-wrapped Hugging Face causal LM with what the analyses ask of a model: ``cfg`` (TransformerLens's
    names), ``tokenizer``, ``to_tokens``, ``parameters()``; ``W_E``/``W_pos`` where the weights are here. ``remote``:
    ``False`` (here), ``True`` (NDIF) or ``"local"`` (nnsight's simulation of a remote run, serialised, run here)."""

    nn: object
    arch: Arch
    cfg: SimpleNamespace
    scales: tuple[float, ...]
    windows: tuple[int | None, ...]
    remote: bool | str = False
    tokenizer: object = None

    def parameters(self):
        return self.nn._module.parameters()

    @property
    def hf(self):
        """The underlying Hugging Face module (meta tensors when the model is hosted)."""
        return self.nn._module

    def _weight(self, path: str | None, offset: int = 0) -> torch.Tensor:
        if path is None:
            raise AttributeError("this model has no learned positional embedding")
        w = module_at(self.hf, path).weight
        if w.is_meta:
            raise AttributeError("the weights are not on this machine (the model is hosted)")
        return w.detach()[offset:]

    W_E = property(lambda self: self._weight(self.arch.embed))
    W_pos = property(lambda self: self._weight(self.arch.pos_embed, self.arch.pos_offset))

    def to_tokens(self, text: str) -> torch.Tensor:
        """``[1, pos]`` token ids, BOS first (as TransformerLens's ``to_tokens``)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return torch.tensor([([bos] if bos is not None else []) + list(ids)])


def is_traced(model) -> bool:
    return isinstance(model, TracedModel)


def module_at(root, path: str):
    """``root.a.b.3.c`` for ``path = "a.b.3.c"`` (digits index module lists); works on modules and envoys."""
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def require_nnsight(param: str, instead: str = "or use the TransformerLens engine"):
    """The ``nnsight`` module, or one line naming ``param``: nnsight is an optional extra of the install."""
    try:
        import nnsight
    except ImportError:
        raise UsageError(param, "nnsight is not installed", 'pip install "gpt2_posheads[nnsight]"', instead) from None
    return nnsight


def check_remote(param: str = "--remote", timeout: float = REMOTE_TIMEOUT_S) -> None:
    """What a remote run needs, before any work (nnsight, an ``NDIF_API_KEY``, NDIF answering within ``timeout``
    seconds, the hub), each failure one line naming ``param``."""
    require_nnsight(param)
    if not os.environ.get("NDIF_API_KEY"):
        from nnsight import CONFIG

        if not CONFIG.API.APIKEY:
            hint = "export NDIF_API_KEY=...; or drop --remote to run through nnsight on a local folder"
            raise UsageError(param, "NDIF_API_KEY is not set", "an NDIF API key (https://login.ndif.us)", hint)
    host = os.environ.get("NDIF_HOST") or "https://api.ndif.us"
    local = "drop --remote to run through nnsight on a local Hugging Face folder"
    why = _connect_within(host, timeout)
    if why is not None:
        raise UsageError(
            param, f"NDIF ({host}) is unreachable within {timeout:g} s ({why})", "a machine that reaches NDIF", local
        )
    from .loading import hub_reachable

    if not hub_reachable(timeout):
        why = "the hosted model's configuration and tokenizer come from the Hugging Face hub, which is unreachable"
        raise UsageError(param, why, "a machine that reaches NDIF and the hub", local)


def _connect_within(url: str, timeout: float) -> str | None:
    """``None`` when NDIF's ``/status`` at ``url`` answers a JSON object within ``timeout`` seconds, name lookup
    included (in a daemon thread abandoned at the deadline), else why not (a proxy may accept any TCP connection)."""
    box: dict[str, str | None] = {}

    def attempt():
        try:
            import httpx

            r = httpx.get(url.rstrip("/") + "/status", timeout=timeout)
            r.raise_for_status()
            box["why"] = None if isinstance(r.json(), dict) else "not NDIF's answer"
        except Exception as e:  # noqa: BLE001 - any failure means: not reachable from here
            box["why"] = type(e).__name__

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(timeout)
    return box.get("why", "timed out")


def load_traced(
    name_or_path: str | os.PathLike,
    remote: bool | str = False,
    device: str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TracedModel:
    """A :class:`TracedModel` of a local Hugging Face folder (``remote=False`` or ``"local"``), or of an NDIF-hosted
    model by hub id (``remote=True``: only its configuration and tokenizer come here; :func:`check_remote` first)."""
    nnsight = require_nnsight("--engine")
    from nnsight import TransformersModel

    if remote is True:
        check_remote()
        from .hub import bounded  # its configuration and tokenizer come from the hub: bounded in time

        model = bounded(lambda: TransformersModel(str(name_or_path), task="text-generation"))
    else:
        path = Path(name_or_path).expanduser()
        if not (path / "config.json").is_file():
            why = f"{name_or_path} is not a local Hugging Face folder"
            hint = "a hub name needs --remote (NDIF) or the TransformerLens engine"
            raise UsageError("--model-dir", why, "a folder with config.json and weights", hint)
        from .loading import quiet_loading

        quiet_loading()
        model = TransformersModel(
            str(path), task="text-generation", dispatch=True, device_map=device or "cpu", dtype=dtype
        )
    nnsight.register("gpt2_posheads")  # the functions a trace calls travel by value
    return traced_from(model, remote=remote, name=str(name_or_path))


def traced_from(model, remote: bool | str = False, name: str | None = None) -> TracedModel:
    """Wrap an nnsight model (``TransformersModel`` / ``LanguageModel``) as a :class:`TracedModel`."""
    hf = model._module
    c = hf.config
    arch = arch_of(c)
    text = c.get_text_config() if hasattr(c, "get_text_config") else c
    n_layers, n_heads, d_model = int(text.num_hidden_layers), int(text.num_attention_heads), int(text.hidden_size)
    layers = module_at(hf, arch.layers)
    scales = tuple(float(module_at(layers[l], arch.attn).scaling) if arch.scaled else 1.0 for l in range(n_layers))
    cfg = SimpleNamespace(
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=int(getattr(text, "num_key_value_heads", None) or n_heads),
        d_head=int(getattr(text, "head_dim", None) or d_model // n_heads),
        d_model=d_model,
        n_ctx=int(getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", 0)),
        d_vocab=int(text.vocab_size),
        positional_embedding_type="rotary" if arch.rotary else "standard",
        normalization_type=arch.norm,
        model_name=name or getattr(c, "_name_or_path", ""),
        model_type=c.model_type,
    )
    return TracedModel(model, arch, cfg, scales, _windows(text, arch, n_layers), remote, model.tokenizer)


# --- inside the trace (these run where the model runs: pure torch, no imports) ---------------------------------
def layer_qkv(layer_attn, arch: Arch, n_heads: int, d_head: int, rot):
    """Queries, keys and values ``[batch, pos, head, d_head]`` float32 of one attention envoy, rotated by ``rot = (cos,
    sin)``, keys and values expanded per query head."""
    if arch.qkv == "split":
        q, k, v = module_at(layer_attn, arch.proj[0]).output.float().chunk(3, dim=-1)
    elif arch.qkv == "heads":
        out = module_at(layer_attn, arch.proj[0]).output.float()
        q, k, v = out.view(*out.shape[:2], n_heads, 3 * d_head).chunk(3, dim=-1)
    else:
        q = module_at(layer_attn, arch.proj[0]).output.float()
        k = module_at(layer_attn, arch.proj[1]).output.float()
        v = module_at(layer_attn, arch.proj[2]).output.float()
    b, n = q.shape[:2]
    q, k, v = (t.detach().reshape(b, n, -1, d_head) for t in (q, k, v))
    if rot is not None:
        q, k = rotate(q, rot[0].float(), rot[1].float()), rotate(k, rot[0].float(), rot[1].float())
    return q, expand_kv(k, n_heads), expand_kv(v, n_heads)


def value_bias(block, layer_attn, arch: Arch, n_heads: int, d_head: int):
    """What every value holds whatever its token, per query head ``[head, d_head]`` (``None``: nothing): the value
    projection of the pre-attention norm's bias plus its own bias, which TransformerLens's compatibility mode folds
    into ``b_O``, so it passes whole whatever the pattern's rows sum to."""
    ln_b = getattr(module_at(block, arch.attn_norm) if arch.attn_norm else None, "bias", None)
    proj = module_at(layer_attn, arch.proj[2 if arch.qkv == "separate" else 0])
    b = None if proj.bias is None else proj.bias.detach().float()
    if ln_b is not None:  # ln_b W (+ b) of an nn.Linear, or of GPT-2's Conv1D (weight [in, out])
        w = proj.weight.detach().float()
        y = ln_b.float() @ (w if arch.qkv == "split" else w.T)
        b = y if b is None else y + b
    if b is None:
        return None
    if arch.qkv == "split":
        b = b.chunk(3)[2]
    elif arch.qkv == "heads":
        b = b.view(n_heads, 3 * d_head)[:, 2 * d_head :]
    b = b.reshape(-1, d_head)
    return b.repeat_interleave(n_heads // b.shape[0], dim=0)


def heads_output(pattern: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``A v`` merged over heads ``[batch, pos, head * d_head]`` (the output projection's input); with the value
    ``bias`` ``[head, d_head]``, ``A (v - b) + b`` (as compatibility mode folds it: an edit that removes attention
    mass removes what the values carry, not the bias); equal to ``A v`` where ``A``'s rows sum to 1."""
    if bias is not None:
        return heads_output(pattern, v - bias) + bias.reshape(-1)
    z = torch.einsum("bhqk,bkhd->bqhd", pattern, v)
    return z.reshape(*z.shape[:2], -1)


# --- the one traced pass -------------------------------------------------------------------------------------
def stream_as_transformer_lens(x: torch.Tensor, center: bool) -> torch.Tensor:
    """A residual ``[batch, pos, d_model]`` as TransformerLens's processed model holds it (float32; ``center``, on a
    LayerNorm model: each row centred over ``d_model``, which LayerNorm reads the same)."""
    x = x.float()
    return x - x.mean(-1, keepdim=True) if center else x


def run_traced(
    model: TracedModel,
    batches: Sequence[torch.Tensor],
    state: dict,
    finish: Callable[[dict], dict],
    on_pattern: Callable[[dict, int, torch.Tensor], None] | None = None,
    on_resid: Callable[[dict, int, torch.Tensor], None] | None = None,
    resid_layers: Sequence[int] = (),
    edits: Sequence[tuple] = (),
    on_logits: Callable[[dict, torch.Tensor], None] | None = None,
) -> dict:
    """One nnsight session over ``batches`` ``[batch, pos]`` returning ``finish(state)``, the only values that leave it
    (``state``: a small dict the callbacks fill). Per batch, in one trace: ``on_resid(state, layer, resid [batch, pos,
    d_model])`` for each of ``resid_layers`` (:func:`stream_as_transformer_lens`; ``n_layers``: the final one) and
    ``on_pattern(state, layer, pattern [batch, head, q, k])`` for every layer. ``edits``, ``(site, layer, how)``:
    ``how(W_pos)`` replaces the position rows, ``how`` ``[pos, d_model]`` is added entering ``layer``, ``z = how(A) v``
    replaces the output projection's input once ``A v`` is checked to be the model's own (the reductions see
    ``how(A)``), ``how(z)`` replaces the head outputs ``[batch, pos, head, d_head]`` (without the value bias). The pass
    stops after the last layer it needs unless ``on_logits(state, logits [batch, pos, d_vocab])`` asks for the output.
    ``A v`` is checked against the head outputs on the first batch (``RuntimeError`` past tolerance)."""
    require_nnsight("--engine")
    from nnsight import save

    nn, arch, cfg = model.nn, model.arch, model.cfg
    scales, windows = model.scales, model.windows
    n_heads, d_head, n_layers = cfg.n_heads, cfg.d_head, cfg.n_layers
    pattern_layers = n_layers if on_pattern is not None or any(e[0] in ("pattern", "z") for e in edits) else 0
    last = max([pattern_layers - 1, *[min(l, n_layers) for l in resid_layers], *[e[1] for e in edits]])
    pos_edits = [how for site, _, how in edits if site == "pos_embed"]
    adds = {l: how for site, l, how in edits if site == "resid_add"}
    pattern_edits = {l: how for site, l, how in edits if site == "pattern"}
    z_edits = {l: how for site, l, how in edits if site == "z"}
    want_resid = set(resid_layers)
    center = getattr(cfg, "normalization_type", "LN") == "LN"
    tol = 1e-3 if next(model.parameters()).dtype == torch.float32 else 3e-2
    with torch.inference_mode(), nn.session(remote=model.remote):
        gaps = []
        for i, toks in enumerate(batches):
            with nn.trace(toks) as tracer:
                for how in pos_edits:
                    pos = module_at(nn, arch.pos_embed)
                    w = pos.weight[arch.pos_offset :]
                    pos.output = replace_positions(pos.output, how(w))
                rot = module_at(nn, arch.rotary).output if arch.rotary is not None and pattern_layers else None
                layers = module_at(nn, arch.layers)
                for l in range(last + 1):
                    if l == n_layers:
                        if l in want_resid:
                            on_resid(state, l, stream_as_transformer_lens(module_at(nn, arch.final_norm).input, center))
                        break
                    block = layers[l]
                    if l in adds:
                        x = block.input
                        block.input = x + adds[l][: x.shape[-2]].to(x.device, x.dtype)
                    if l in want_resid:
                        on_resid(state, l, stream_as_transformer_lens(block.input, center))
                    if l >= pattern_layers:
                        continue
                    attn = module_at(block, arch.attn)
                    q, k, v = layer_qkv(attn, arch, n_heads, d_head, rot)
                    pattern = attention_pattern(q, k, scales[l], windows[l])
                    edit = pattern_edits.get(l)
                    if edit is not None or i == 0:
                        out = module_at(attn, arch.out)
                        z = out.input
                        gap = z_gap(heads_output(pattern, v), z)
                        gaps.append(gap)
                        if edit is not None:
                            if gap > tol:
                                raise RuntimeError(
                                    f"layer {l}: the recomputed attention does not reproduce the model's head "
                                    f"outputs (relative gap {float(gap):.1e}); the edit was not applied"
                                )
                            pattern = edit(pattern)
                            bias = value_bias(block, attn, arch, n_heads, d_head)
                            out.input = edited = heads_output(pattern, v, bias).to(z.dtype)
                    if l in z_edits:  # the head outputs as TransformerLens holds them: without the value bias
                        out = module_at(attn, arch.out)
                        bias = value_bias(block, attn, arch, n_heads, d_head)
                        z = out.input if edit is None else edited
                        b = 0.0 if bias is None else bias.reshape(-1)
                        heads = (z.float() - b).reshape(*z.shape[:2], n_heads, d_head)
                        out.input = (z_edits[l](heads).reshape(z.shape) + b).to(z.dtype)
                    if on_pattern is not None:
                        on_pattern(state, l, pattern)
                if on_logits is None:
                    tracer.stop()
                else:
                    on_logits(state, nn.output.logits.float())
        result = finish(state)
        result["_max_gap"] = torch.stack(gaps).max() if gaps else torch.zeros(())
        save(result)
    gap = float(result.pop("_max_gap"))
    if gap > tol:
        raise RuntimeError(
            f"the nnsight engine's attention, recomputed from queries and keys, does not reproduce this model's "
            f"head outputs (relative gap {gap:.1e} > {tol:g}): its attention is not softmax(scale q.k + mask)"
        )
    return result


def result_bytes(result: dict) -> int:
    """Bytes of the tensors a traced pass returns (what travels back from NDIF, uncompressed)."""
    return sum(t.numel() * t.element_size() for t in result.values() if isinstance(t, torch.Tensor))


class TracedEngine(Engine):
    """An nnsight-traced model (:class:`TracedModel`): one :func:`run_traced` trace per call (module doc). It edits
    every site but a replacement of the residual stream (a trace's edits add to the stream)."""

    name = ENGINE
    sites = frozenset({"pos_embed", "resid_add", "pattern", "z"})
    refuse_hint = "use the TransformerLens engine (gpt2_posheads.load_model)"
    reads_refused = "a trace hands a reduction each layer's pattern and residual only"

    def _bind(self, e: Edit) -> list[tuple]:
        """``(site, layer, how)`` in each of the edit's layers; an addition to the stream is computed here
        (``fn(model)``), everything else runs in the trace."""
        how = e.fn(self.model) if e.site == "resid_add" else e.fn
        return [(e.site, int(l), how) for l in e.layers or (-1,)]

    def _trace(self, batches, reduction, edits, **callbacks) -> dict:
        state, finish = reduction.state, reduction.finish
        return run_traced(self.model, list(materialise(batches)), state, finish, edits=self.bind(edits), **callbacks)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches, on_logits = list(materialise(batches)), None
        if reduction.logits is not None:  # the trace hands over each batch's logits in order: a count finds its tokens
            seen = iter(batches)
            on_logits = lambda state, logits: reduction.logits(state, next(seen).to(logits.device), logits)  # noqa: E731
        return self._trace(batches, reduction, edits, on_pattern=reduction.step, on_logits=on_logits)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        if reduction.bulk:
            why = "it would bring back every token's residual stream from where the model runs"
            self.refuse(f"keep {reduction.bulk}", why, "ask for the reduced result, or use the TransformerLens engine")
        return self._trace(batches, reduction, edits, on_resid=reduction.step, resid_layers=list(layers))

    def run(self, tokens, edits=()) -> torch.Tensor:
        keep = lambda state, logits: state.__setitem__("logits", logits)  # noqa: E731
        return run_traced(self.model, [tokens], {}, dict, on_logits=keep, edits=self.bind(edits))["logits"]

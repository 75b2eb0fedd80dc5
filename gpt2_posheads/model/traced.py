"""Models that do not fit one machine: a Hugging Face causal LM under nnsight, run here or on NDIF.

Where each architecture keeps what the scores use (:data:`ARCHS`), the traced model (:class:`TracedModel`), its loading
and the ``--remote`` check; the engine that runs it is :mod:`~gpt2_posheads.model.engine_nnsight`. ``nnsight`` is
imported only here and there, and only when a traced model is made (importing it patches ``torch`` and mounts a ``save``
method on every object). Remote runs need ``NDIF_API_KEY``; :func:`check_remote` says so in one line, and bounds the
connection attempt to a few seconds, before any work."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from .validation import UsageError

ENGINE = "nnsight"
REMOTE_TIMEOUT_S = 3.0
DEFAULT_NDIF_HOST = "https://api.ndif.us"


# --- architectures: where each model keeps what the scores use ------------------------------------------------
@dataclass(frozen=True)
class Arch:
    """Module paths (relative to the Hugging Face model) of one architecture. ``qkv``: ``"split"`` (one fused
    projection, ``[q | k | v]`` along features: GPT-2), ``"heads"`` (one fused projection, ``[q k v]`` within each head:
    GPT-NeoX), or ``"separate"`` (``q_proj``, ``k_proj``, ``v_proj``)."""

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
        raise UsageError(
            "--engine",
            f"nnsight engine does not know where {kind!r} models keep their queries and keys",
            f"allowed model types {', '.join(sorted(ARCHS))}",
            "use the TransformerLens engine for this model",
        )
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
    """An nnsight-wrapped Hugging Face causal LM with what the analyses ask of a model: ``cfg`` (``n_layers``,
    ``n_heads``, ``n_kv_heads``, ``d_head``, ``d_model``, ``n_ctx``, ``d_vocab``, ``positional_embedding_type``,
    ``model_name``), ``tokenizer``, ``to_tokens``, ``parameters()``; ``W_E``/``W_pos`` where the weights are here.
    ``remote``: ``False`` (run here), ``True`` (NDIF) or ``"local"`` (nnsight's simulation of a remote run: serialised
    and deserialised here, then run here; what the tests use)."""

    nn: object
    arch: Arch
    cfg: SimpleNamespace
    scales: tuple[float, ...]
    windows: tuple[int | None, ...]
    remote: bool | str = False
    tokenizer: object = None
    extra: dict = field(default_factory=dict)

    # -- what the rest of the toolkit reads off a model --
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

    @property
    def W_E(self) -> torch.Tensor:
        return self._weight(self.arch.embed)

    @property
    def W_pos(self) -> torch.Tensor:
        return self._weight(self.arch.pos_embed, self.arch.pos_offset)

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


def ndif_host() -> str:
    return os.environ.get("NDIF_HOST") or DEFAULT_NDIF_HOST


def check_remote(param: str = "--remote", timeout: float = REMOTE_TIMEOUT_S) -> None:
    """Everything a remote run needs before any work: nnsight, an ``NDIF_API_KEY``, and NDIF's host accepting a
    connection within ``timeout`` seconds. Each failure is one line naming ``param``."""
    require_nnsight(param)
    if not os.environ.get("NDIF_API_KEY"):
        from nnsight import CONFIG

        if not CONFIG.API.APIKEY:
            raise UsageError(
                param,
                "NDIF_API_KEY is not set",
                "an NDIF API key (https://login.ndif.us)",
                "export NDIF_API_KEY=...; or drop --remote to run through nnsight on a local folder",
            )
    host, local = ndif_host(), "drop --remote to run through nnsight on a local Hugging Face folder"
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
    """``None`` when NDIF at ``url`` answers its ``/status`` with a JSON object within ``timeout`` seconds, name
    lookup included (the request runs in a daemon thread that is abandoned at the deadline), else why not. A bare
    TCP connection is not enough: a proxy may accept connections to anywhere."""
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
    """A :class:`TracedModel`: a local Hugging Face folder loaded here (``remote=False`` or ``"local"``), or an
    NDIF-hosted model named by its hub id (``remote=True``: only its configuration and tokenizer come here, the
    weights stay on NDIF's side; :func:`check_remote` first)."""
    nnsight = require_nnsight("--engine")
    from nnsight import TransformersModel

    if remote is True:
        check_remote()
        from .hub import bounded  # its configuration and tokenizer come from the hub: bounded in time

        model = bounded(lambda: TransformersModel(str(name_or_path), task="text-generation"))
    else:
        path = Path(name_or_path).expanduser()
        if not (path / "config.json").is_file():
            raise UsageError(
                "--model-dir",
                f"{name_or_path} is not a local Hugging Face folder",
                "a folder with config.json and weights",
                "a hub name needs --remote (NDIF) or the TransformerLens engine",
            )
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

"""A file of exactly what the analyses consume, so they can be checked and rerun without the model.

``build_cache`` runs a model once and stores, in one safetensors file with its provenance:

* ``prompts`` ``[n, pos]`` and ``diagonals`` ``[n_layers, n_heads, n_offsets]`` (→ the head ranking);
* ``score_profile`` ``[n_layers, n_heads, 2w+1]`` (→ the self-suppressing / prev-boosting taxonomy);
* for chosen heads, ``pattern.L{l}H{h}`` and ``raw_scores.L{l}H{h}`` ``[pos, pos]`` on the first prompt;
* ``w_pos`` and ``ext_pos.L{l}`` ``[n_ctx, d_model]`` for every layer ``0..n_layers``;
* ``repeat.{name}.tokens`` and ``repeat.{name}.probs`` (next-token distribution) for repeat-string prompts.

:class:`PosheadsCache` reads it back; ``rank_prev_heads``, ``extended_pos_embeddings`` and
``classify_prev_heads`` accept one in place of a model.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from ..analysis.diagonals import diagonal_attention, rank_from_diagonals
from ..analysis.induction import induction_scores
from ..analysis.interventions import average_pos_embed, mask_previous_attention
from ..analysis.measures import next_token_probs
from ..analysis.posembed import extended_pos_embeddings_by_layer, load_w_pos
from ..analysis.repeat_prompt import repeat_string_prompt, single_token_target
from ..analysis.scores import attention_scores, classify_prev_heads, score_profile
from ..model.validation import head_name, parse_head

REPEAT_TARGETS = {"apple_orange": (" apple orange", 0), "orange_apple": (" orange apple", 0),
                  "ninja_turtle_pirate": (" ninja turtle pirate", 1)}


@dataclass
class PosheadsCache:
    tensors: dict[str, torch.Tensor]
    meta: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> "PosheadsCache":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata().get("provenance", "{}"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        return cls(tensors, meta)

    def save(self, path: str | Path) -> Path:
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.tensors.items()}, str(path),
                  metadata={"provenance": json.dumps(self.meta)})
        return path

    # --- what the analyses read -------------------------------------------------------------
    @property
    def diagonals(self) -> torch.Tensor:
        return self.tensors["diagonals"]

    def ranking(self) -> pd.DataFrame:
        return rank_from_diagonals(self.diagonals)

    def ext_pos(self, layer: int) -> torch.Tensor:
        key = f"ext_pos.L{layer}"
        if key not in self.tensors:
            raise KeyError(f"layer {layer} is not in this cache: it holds {sorted(self.layers())}")
        return self.tensors[key]

    def layers(self) -> list[int]:
        return sorted(int(k.split(".L")[1]) for k in self.tensors if k.startswith("ext_pos.L"))

    def pattern(self, head) -> torch.Tensor:
        return self.tensors[f"pattern.{head_name(*parse_head(head))}"]

    def raw_scores(self, head) -> torch.Tensor:
        return self.tensors[f"raw_scores.{head_name(*parse_head(head))}"]

    def classification(self, threshold: float = 0.5) -> pd.DataFrame:
        return classify_prev_heads(self.tensors["score_profile"], threshold)

    def repeat_probs(self, name: str) -> torch.Tensor:
        return self.tensors[f"repeat.{name}.probs"]


def build_cache(model, prompts: torch.Tensor, heads, model_label: str, max_offset: int = 32, window: int = 3,
                ext_n_prompts: int = 16, seed: int = 0, prompt_source: str = "", progress: bool = True) -> PosheadsCache:
    """Run ``model`` once over everything the analyses need (see module doc)."""
    heads = [parse_head(h, model) for h in heads]
    t: dict[str, torch.Tensor] = {"prompts": prompts.clone()}
    t["diagonals"] = diagonal_attention(model, prompts, max_offset=max_offset, progress=progress)
    t["score_profile"] = score_profile(model, prompts, window=window)
    for l, h in heads:
        s = attention_scores(model, prompts[0], l, h)
        t[f"pattern.{head_name(l, h)}"] = s["pattern"]
        t[f"raw_scores.{head_name(l, h)}"] = s["raw"]
    t["w_pos"] = load_w_pos(model)
    ext = extended_pos_embeddings_by_layer(model, range(model.cfg.n_layers + 1), n_prompts=ext_n_prompts, seed=seed,
                                           progress=progress)
    for l, e in ext.items():
        t[f"ext_pos.L{l}"] = e
    names = list(REPEAT_TARGETS)
    # words that are several tokens in this vocabulary become single-token nouns (the same in every target)
    single = single_token_target(model.tokenizer, [REPEAT_TARGETS[n][0] for n in names])
    for name, target in zip(names, single):
        n_given = REPEAT_TARGETS[name][1]
        rp = repeat_string_prompt(model.tokenizer, target, n_given=n_given, seed=seed, max_len=model.cfg.n_ctx)
        t[f"repeat.{name}.tokens"] = rp.tokens
        t[f"repeat.{name}.probs"] = next_token_probs(model, rp.tokens)[0]
    # the mechanism of the GPT-2 post, measured once: induction, and the sharpest previous-token head
    # ("aggregator") under previous-position masking in the layers below it and under W_pos averaging
    ind = induction_scores(model, n_seqs=8, seg_len=min(50, (model.cfg.n_ctx - 1) // 2), seed=seed)
    t["induction.scores"] = ind.scores
    t["induction.losses"] = torch.tensor([ind.loss_first, ind.loss_second])
    rank = rank_from_diagonals(t["diagonals"])
    # the aggregator candidate: the sharpest previous-token head above layer 0 (L4H11 reads the heads below
    # it; a layer-0 head has nothing below to mask), else the top-ranked head
    above = rank[rank.layer >= 1]
    above_prev = above[above.is_prev_token]
    agg = above_prev.iloc[0] if len(above_prev) else rank.iloc[0]
    agg_l, agg_h = int(agg["layer"]), int(agg["head"])
    masked = float("nan")
    if agg_l > 0:
        masked = float(diagonal_attention(model, prompts, max_offset=2, progress=False,
                                          fwd_hooks=mask_previous_attention(5, range(agg_l)).hooks(model))[agg_l, agg_h, 1])
    averaged = float(diagonal_attention(model, prompts, max_offset=2, progress=False,
                                        fwd_hooks=average_pos_embed(10).hooks(model))[agg_l, agg_h, 1])
    t["mechanism.aggregator_prev_mass"] = torch.tensor([float(t["diagonals"][agg_l, agg_h, 1]), masked, averaged])
    # which upstream heads feed the sharpest previous-token head above layer 0 (direct-path ablation)
    src_head = None
    if len(above):
        from ..analysis.sources import path_ablation

        src_l, src_h = int(above.iloc[0]["layer"]), int(above.iloc[0]["head"])
        src_head = head_name(src_l, src_h)
        df = path_ablation(model, prompts[:16], src_l, src_h)
        order = [f"{r.source}|{r.side}" for r in df.itertuples()]
        t[f"sources.{src_head}.drop"] = torch.tensor(df["drop"].to_numpy(), dtype=torch.float32)
    import transformer_lens

    meta = {"model": model_label, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "transformer_lens": getattr(transformer_lens, "__version__", "unknown"), "torch": torch.__version__,
            "prompt_source": prompt_source, "n_prompts": int(prompts.shape[0]), "seq_len": int(prompts.shape[1]),
            "max_offset": max_offset, "exclude_bos": True, "window": window, "ext_n_prompts": ext_n_prompts,
            "seed": seed, "heads": [head_name(l, h) for l, h in heads], "repeat_targets": REPEAT_TARGETS,
            "aggregator": head_name(agg_l, agg_h),
            "sources_target": src_head, "sources_order": order if src_head else [],
            "mechanism": "aggregator_prev_mass = [clean, previous position masked every 5th query in the layers "
                         "below it, W_pos averaged in groups of 10]; induction.losses = [first copy, second copy]",
            "cfg": {k: int(getattr(model.cfg, k)) for k in ("n_layers", "n_heads", "d_model", "n_ctx", "d_vocab")}}
    return PosheadsCache(t, meta)

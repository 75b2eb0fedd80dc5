"""A file of exactly what the analyses consume, so they can be checked and rerun without the model.

``build_cache`` runs a model once and stores, in one safetensors file with its provenance:

* ``prompts`` ``[n, pos]`` and ``diagonals`` ``[n_layers, n_heads, n_offsets]`` (→ the head ranking);
* ``score_profile`` ``[n_layers, n_heads, 2w+1]`` (→ the self-suppressing / prev-boosting taxonomy);
* for chosen heads, ``pattern.L{l}H{h}`` and ``raw_scores.L{l}H{h}`` ``[pos, pos]`` on the first prompt;
* ``w_pos`` and ``ext_pos.L{l}`` ``[n_ctx, d_model]`` for every layer ``0..n_layers`` (measured after BOS when the
  model has one: ``ext_bos`` in the provenance; row 0 is then the BOS position);
* ``repeat.{name}.tokens`` and ``repeat.{name}.probs`` (next-token distribution) for repeat-string prompts.

:class:`PosheadsCache` reads it back; ``prev_token_ranking``, ``diagonal_attention`` and ``extended_pos_embeddings``
accept one in place of a model.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from ..analysis.diagonals import choose_aggregator, diagonal_attention, rank_from_diagonals
from ..analysis.induction import induction_scores
from ..analysis.interventions import average_pos_embed, mask_previous_attention, masked_queries
from ..analysis.measures import compare_head_patterns, next_token_probs
from ..analysis.posembed import default_bos, extended_pos_embeddings_by_layer, load_w_pos
from ..analysis.repeat_prompt import repeat_string_prompt, single_token_target
from ..analysis.scores import LABEL_THRESHOLD, attention_scores, classify_prev_heads, score_profile
from ..analysis.sources import path_ablation
from ..model.loading import has_learned_positions
from ..model.state import measures_caller_model
from ..model.validation import head_name, parse_head

REPEAT_TARGETS = {
    "apple_orange": (" apple orange", 0),
    "orange_apple": (" orange apple", 0),
    "ninja_turtle_pirate": (" ninja turtle pirate", 1),
}


@dataclass
class PosheadsCache:
    tensors: dict[str, torch.Tensor]
    meta: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> PosheadsCache:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata().get("provenance", "{}"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not iterable
        return cls(tensors, meta)

    def save(self, path: str | Path) -> Path:
        """Write atomically (a temporary file renamed over ``path``): an interrupted save leaves the old cache."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial")
        tensors = {k: v.contiguous() for k, v in self.tensors.items()}
        save_file(tensors, str(tmp), metadata={"provenance": json.dumps(self.meta)})
        tmp.replace(path)
        return path

    @staticmethod
    def is_cache_file(path: str | Path) -> bool:
        """A safetensors file with this toolkit's provenance (one a cache may replace)."""
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                return "provenance" in (f.metadata() or {})
        except Exception:  # noqa: BLE001 - any unreadable file is not a cache
            return False

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

    def classification(self, threshold: float = LABEL_THRESHOLD) -> pd.DataFrame:
        return classify_prev_heads(self.tensors["score_profile"], threshold)

    def repeat_probs(self, name: str) -> torch.Tensor:
        return self.tensors[f"repeat.{name}.probs"]


@measures_caller_model
def build_cache(
    model,
    prompts: torch.Tensor,
    heads,
    model_label: str,
    window: int = 3,
    ext_n_prompts: int = 16,
    seed: int = 0,
    prompt_source: str = "",
    heads_chosen: str = "",
    progress: bool = True,
) -> PosheadsCache:
    """Run ``model`` once over everything the analyses need (module doc); the diagonals hold every offset, and the
    aggregator is :func:`~gpt2_posheads.analysis.diagonals.choose_aggregator` of their ranking, as in every script."""
    heads = [parse_head(h, model) for h in heads]
    t: dict[str, torch.Tensor] = {"prompts": prompts.clone()}
    t["diagonals"] = diagonal_attention(model, prompts, progress=progress)
    t["score_profile"] = score_profile(model, prompts, window=window)
    for l, h in heads:
        s = attention_scores(model, prompts[0], l, h)
        t[f"pattern.{head_name(l, h)}"], t[f"raw_scores.{head_name(l, h)}"] = s["pattern"], s["raw"]
    learned = has_learned_positions(model)
    if learned:
        t["w_pos"] = load_w_pos(model)
    ext_bos = default_bos(model)
    ext = extended_pos_embeddings_by_layer(
        model, range(model.cfg.n_layers + 1), n_prompts=ext_n_prompts, seed=seed, progress=progress, bos=ext_bos
    )
    t.update({f"ext_pos.L{l}": e for l, e in ext.items()})
    # words that are several tokens in this vocabulary become single-token nouns (the same in every target)
    single = single_token_target(model.tokenizer, [target for target, _ in REPEAT_TARGETS.values()])
    repeat_skipped = ""
    for (name, (_, n_given)), target in zip(REPEAT_TARGETS.items(), single):
        try:
            rp = repeat_string_prompt(model.tokenizer, target, n_given=n_given, seed=seed, max_len=model.cfg.n_ctx)
        except ValueError as e:  # a context too short for the prompt: stored without it, and said in the provenance
            repeat_skipped = str(e)
            break
        t[f"repeat.{name}.tokens"] = rp.tokens
        t[f"repeat.{name}.probs"] = next_token_probs(model, rp.tokens)[0]
    # the mechanism of the GPT-2 post, measured once: induction (with and without BOS), and the aggregator
    # under previous-position masking in the layers below it and under W_pos averaging
    seg = min(50, (model.cfg.n_ctx - 1) // 2)
    for key, bos in (("losses", True), ("losses_no_bos", False)):
        ind = induction_scores(model, n_seqs=8, seg_len=seg, seed=seed, bos=bos)
        t.setdefault("induction.scores", ind.scores)
        t[f"induction.{key}"] = torch.tensor([ind.loss_first, ind.loss_second])
    rank = rank_from_diagonals(t["diagonals"])
    agg_l, agg_h = choose_aggregator(rank)
    masked_rows, averaged = [float("nan"), float("nan")], float("nan")
    if agg_l > 0:  # on the rows the mask touches (every 5th query), as the claim is judged
        mask, rows = [mask_previous_attention(5, range(agg_l))], masked_queries(5, prompts.shape[1])
        cmp = compare_head_patterns(model, prompts[:8], (agg_l, agg_h), mask, rows=rows)
        masked_rows = [cmp["prev_rows_clean"], cmp["prev_rows_intervened"]]
    if learned:
        averaged = diagonal_attention(model, prompts, progress=False, edits=[average_pos_embed(10)])[agg_l, agg_h, 1]
    t["mechanism.aggregator_prev_mass"] = torch.tensor([float(t["diagonals"][agg_l, agg_h, 1]), float(averaged)])
    t["mechanism.masked_rows"] = torch.tensor(masked_rows)
    # which upstream heads feed the aggregator (direct-path ablation); none for a layer-0 aggregator
    order: list[str] = []
    if agg_l > 0:
        df = path_ablation(model, prompts[:16], agg_l, agg_h)
        order = [f"{r.source}|{r.side}" for r in df.itertuples()]
        t[f"sources.{head_name(agg_l, agg_h)}.drop"] = torch.tensor(df["drop"].to_numpy(), dtype=torch.float32)
    import transformer_lens

    meta = {
        "model": model_label,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "transformer_lens": getattr(transformer_lens, "__version__", "unknown"),
        "torch": torch.__version__,
        "prompt_source": prompt_source,
        "n_prompts": int(prompts.shape[0]),
        "seq_len": int(prompts.shape[1]),
        "exclude_bos": True,
        "window": window,
        "ext_n_prompts": ext_n_prompts,
        "ext_bos": ext_bos,
        "seed": seed,
        "heads": [head_name(l, h) for l, h in heads],
        "heads_chosen": heads_chosen,
        "repeat_targets": REPEAT_TARGETS,
        "repeat_not_stored": repeat_skipped,
        "aggregator": head_name(agg_l, agg_h),
        "induction_seg_len": seg,
        "sources_target": head_name(agg_l, agg_h) if order else None,
        "sources_order": order,
        "mechanism": "aggregator_prev_mass = [clean, W_pos averaged in groups of 10 (NaN without learned "
        "positions)]; masked_rows = its previous-token attention on the rows masked every 5th query in the layers "
        "below it, [clean, masked], over the first 8 prompts (NaN for a layer-0 aggregator); induction.losses "
        "= [first copy, second copy] on BOS r r, induction.losses_no_bos on r r (each copy's first "
        "token left out)",
        "cfg": {k: int(getattr(model.cfg, k)) for k in ("n_layers", "n_heads", "d_model", "n_ctx", "d_vocab")},
    }
    return PosheadsCache(t, meta)

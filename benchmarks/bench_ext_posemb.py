"""Extended positional embeddings at layer 2 of a GPT-2-small-shaped model (seq_len 1024, 8 tokens):
ours vs (a) a naive ``run_with_cache`` of the whole model and (b) the bare Hugging Face ``GPT2Model``
computing the same first two blocks (the practical floor). All three compute the toolkit's definition
(:func:`~gpt2_posheads.analysis.posembed.extended_pos_embeddings`): each prompt is BOS then the token repeated,
``seq_len`` tokens in all, and each row minus the mean over the repeated token's rows (BOS's left out of the mean).

    python benchmarks/bench_ext_posemb.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import einops  # noqa: E402
import torch  # noqa: E402
from _common import best_time, gpt2_shaped_dir  # noqa: E402


def main():
    from transformers import GPT2Model

    from gpt2_posheads import load_model
    from gpt2_posheads.analysis.posembed import extended_pos_embeddings, random_token_ids

    torch.set_num_threads(2)
    layer, seq_len, n_tok, batch = 2, 1024, 8, 4
    d = gpt2_shaped_dir()
    model = load_model(d, device="cpu")
    tokens = random_token_ids(model, n_tok, seed=0)
    bos = model.tokenizer.bos_token_id

    def prompts(ts: torch.Tensor) -> torch.Tensor:
        """``[len(ts), seq_len]``: BOS, then each token repeated."""
        body = einops.repeat(ts, "b -> b pos", pos=seq_len - 1)
        return torch.cat([torch.full((len(ts), 1), bos), body], dim=1)

    def centred(r: torch.Tensor) -> torch.Tensor:
        """``[..., seq_len, d_model]`` minus the mean over the repeated token's rows (1..)."""
        return r - r[..., 1:, :].mean(-2, keepdim=True)

    def ours():
        return extended_pos_embeddings(model, layer, tokens=tokens, seq_len=seq_len, batch_size=batch)

    def naive():
        acc = 0
        with torch.inference_mode():
            for t in tokens:  # one prompt at a time: a whole-model cache of 8 x 1024 tokens needs ~10 GB
                _, cache = model.run_with_cache(prompts(t[None]))
                acc = acc + centred(cache[f"blocks.{layer}.hook_resid_pre"][0])
                del cache
        return acc / n_tok

    hf = GPT2Model.from_pretrained(d).eval()
    hf.h = hf.h[:layer]  # only the blocks before `layer`

    def floor():
        acc = 0
        with torch.inference_mode():
            for i in range(0, n_tok, batch):
                r = hf(prompts(tokens[i : i + batch]), output_hidden_states=True).hidden_states[layer]
                acc = acc + centred(r).sum(0)
        return acc / n_tok

    t_ours, t_naive, t_floor = best_time(ours, 2), best_time(naive, 1), best_time(floor, 2)
    diff = float((ours() - naive()).abs().max())
    from gpt2_posheads.model.state import describe_line

    print(describe_line())
    print(f"layer {layer}, {n_tok} tokens x {seq_len} positions, 12 x 768 GPT-2 shape, CPU threads 2")
    print(f"  (a) naive run_with_cache : {t_naive:7.2f} s")
    print(f"  (b) bare HF, 2 blocks    : {t_floor:7.2f} s")
    print(f"  ours                     : {t_ours:7.2f} s   (max |ours - naive| = {diff:.1e})")
    print(
        f"speed-up vs naive: {t_naive / t_ours:.1f}x (target >= 4x); "
        f"ours / HF floor: {t_ours / t_floor:.2f}x (target <= 1.5x)"
    )


if __name__ == "__main__":
    main()

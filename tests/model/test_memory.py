"""A loaded model keeps one copy of its weights: the converted ones, not the mapped checkpoint beside them."""

from pathlib import Path

import torch


def test_the_checkpoint_is_not_kept_mapped_and_the_model_is_unchanged(tiny_dir, tiny_model):
    from transformers import AutoModelForCausalLM

    maps = Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else ""
    assert str(tiny_dir) not in maps  # the checkpoint is no longer mapped (its converted weights are the copy kept)
    hf = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    toks = torch.randint(0, tiny_model.cfg.d_vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ours, ref = tiny_model(toks), hf(toks).logits
    # compatibility mode centres the unembedding: logits agree up to a constant per position
    torch.testing.assert_close(ours - ours.mean(-1, keepdim=True), ref - ref.mean(-1, keepdim=True), atol=1e-4, rtol=0)

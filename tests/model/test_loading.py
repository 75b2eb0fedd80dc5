import time

import pytest
import torch

from gpt2_posheads import ModelLoadError, load_model, make_random_model_dir
from gpt2_posheads.model.loading import resolve_model_source


def test_missing_local_directory_is_clear(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope")


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(tmp_path)


def test_offline_hub_name_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = time.time()
    with pytest.raises(ModelLoadError, match="local"):
        resolve_model_source("some-org/model-that-is-not-cached")
    assert time.time() - t < 10


def test_local_model_matches_hf_logits(tiny_dir, tiny_model):
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(tiny_dir).eval()
    toks = torch.randint(0, tiny_model.cfg.d_vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = torch.log_softmax(tiny_model(toks), -1)
        b = torch.log_softmax(hf(toks).logits, -1)
    torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)
    assert tiny_model.cfg.n_layers == 3 and tiny_model.cfg.n_ctx == 64


def test_random_model_dir_validates(tmp_path, small_tokenizer):
    with pytest.raises(ValueError, match="divisible"):
        make_random_model_dir(tmp_path, n_heads=3, d_model=64, tokenizer=small_tokenizer)
    with pytest.raises(ValueError, match="n_layers"):
        make_random_model_dir(tmp_path, n_layers=0, tokenizer=small_tokenizer)


def test_gpt2_tokenizer_from_shared(shared):
    from gpt2_posheads import gpt2_tokenizer

    tok = gpt2_tokenizer()
    assert len(tok) == 50257
    assert tok("hello world")["input_ids"] == [31373, 995]
    # the merges that shared/ stores corrupted are repaired: these words tokenize as GPT-2 does
    assert tok.convert_ids_to_tokens(tok("Running")["input_ids"]) == ["Running"]
    assert tok.decode(tok(" Configuration Runtime")["input_ids"]) == " Configuration Runtime"

"""Every public function names the argument it refuses (``model.validation.check_arguments``, before any work); an
adjusted value is said (a context cut to the model's, a missing BOS token); a model whose half-precision weights
overflow says NaN and its dtype instead of a wrong cause; ``--engine fast`` on a rotary model is one line."""

import inspect
import subprocess
import sys

import pytest
import torch

import gpt2_posheads
from gpt2_posheads import average_pos_embed, load_model, make_prompts, make_random_model_dir, posts, prev_token_ranking
from gpt2_posheads.model.validation import NonFiniteError
from gpt2_posheads.posts.gpt2_prev_heads import l4h11_edit, mask_prev_attention, model_run, rank_prev_heads

from conftest import random_arch_dir

MODULES = (gpt2_posheads, posts.gpt2_prev_heads, posts.sticky_plateau, posts.similar_content, posts.prev_token_toy)
PUBLIC = {
    f"{m.__name__}.{n}": getattr(m, n)
    for m in (*MODULES, posts.lost_in_middle)
    for n in m.__all__
    if callable(getattr(m, n))
    and not inspect.ismodule(getattr(m, n))
    and not (isinstance(getattr(m, n), type) and issubclass(getattr(m, n), Exception))
    and getattr(m, n) is not gpt2_posheads.ClaimResult  # a record: its ``model`` is the label of the model measured
}


def taking(param: str) -> list[str]:
    return sorted(n for n, f in PUBLIC.items() if param in inspect.signature(f).parameters)


def required(fn, **given):
    """Placeholders for ``fn``'s other required arguments: the argument under test is checked first."""
    params = inspect.signature(fn).parameters.values()
    return {
        p.name: None for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    } | given


@pytest.mark.parametrize("name", taking("model"))
def test_every_public_callable_taking_a_model_names_a_wrong_model(name):
    fn = PUBLIC[name]
    with pytest.raises(TypeError, match=r"^model: must be a TransformerLens"):
        fn(**required(fn, model="gpt2"))


@pytest.mark.parametrize("name", taking("heads"))
def test_every_public_callable_taking_heads_names_wrong_heads(name, tiny_model):
    fn = PUBLIC[name]
    with pytest.raises(
        TypeError, match=r"^heads must be head names \('L4H11'\), \(layer, head\) pairs or 'auto:N', got int"
    ):
        fn(**required(fn, model=tiny_model, heads=3))


def test_the_walks_reach_the_claim_functions():
    assert "gpt2_posheads.posts.gpt2_prev_heads.mask_prev_attention" in taking("heads")
    assert {"gpt2_posheads.prev_token_ranking", "gpt2_posheads.posts.gpt2_prev_heads.ModelRun"} <= set(taking("model"))


def test_wrong_types_and_ranges_are_named(tiny_model, small_tokenizer):
    toks = torch.randint(1, 100, (2, 16))
    cases = [
        (lambda: make_prompts(small_tokenizer, "8", 64), TypeError, "n_prompts must be an integer, got str ('8')"),
        (
            lambda: make_prompts(small_tokenizer, 8, 0),
            ValueError,
            "seq_len: 0 is out of range; allowed an",
        ),
        (lambda: make_prompts("tok", 8, 64), TypeError, "tokenizer must be a Hugging Face tokenizer"),
        (lambda: mask_prev_attention(tiny_model, run="run"), TypeError, "run must be a ModelRun"),
        (lambda: prev_token_ranking(tiny_model, toks, batch_size=0), ValueError, "batch_size: 0 is out of range"),
        (lambda: prev_token_ranking(tiny_model, toks, progress="no"), TypeError, "progress must be True or False"),
        (lambda: prev_token_ranking(tiny_model, "hello"), TypeError, "prompts must be token ids [batch, pos]"),
        (lambda: average_pos_embed("10"), TypeError, "group_size must be an integer, got str"),
        (lambda: l4h11_edit(tiny_model, factors=[1.0, "2"]), TypeError, "factors entry must be a finite number"),
        (lambda: model_run(tiny_model, seq_len=None), TypeError, "seq_len must be an integer, got NoneType"),
        (lambda: posts.sticky_plateau.sticky_plateau(seed="0"), TypeError, "seed must be an integer, got str"),
        (lambda: posts.sticky_plateau.sticky_plateau(seed=-1), ValueError, "seed: -1 is out of range"),
    ]
    for call, error, words in cases:
        with pytest.raises(error) as e:
            call()
        assert str(e.value).startswith(words), (words, str(e.value))


def test_a_context_cut_to_the_models_is_said(tiny_model, capsys):
    run = model_run(tiny_model, n_prompts=2, seq_len=100_000)
    assert run.prompts.shape == (2, tiny_model.cfg.n_ctx)
    assert "note: seq_len 100000 is capped at the model's context, 64" in capsys.readouterr().err


@pytest.fixture(scope="module")
def no_bos(tmp_path_factory):
    """A model folder whose tokenizer has no BOS token (only an EOS)."""
    from transformers import AutoTokenizer

    from gpt2_posheads.model.paths import ORGANISM_DIR

    tok = AutoTokenizer.from_pretrained(ORGANISM_DIR)
    tok.bos_token = None
    out = tmp_path_factory.mktemp("nobos")
    make_random_model_dir(out, n_layers=1, n_heads=2, d_model=16, n_ctx=32, tokenizer=tok)
    return out, tok


def test_a_tokenizer_without_bos_starts_prompts_with_its_eos_and_says_so_once(no_bos, capsys):
    folder, tok = no_bos
    assert tok.bos_token_id is None
    eos = tok.eos_token_id
    for _ in range(2):  # the tokenizer as saved, and as TransformerLens hands it back (its EOS set as the BOS)
        assert (make_prompts(tok, 2, 8)[:, 0] == eos).all()
    model = load_model(folder)
    for _ in range(2):
        assert (model_run(model, n_prompts=2, seq_len=8).prompts[:, 0] == eos).all()
    said = [line for line in capsys.readouterr().err.splitlines() if "no BOS token" in line]
    line = f"note: the tokenizer has no BOS token: prompts start with its EOS token {tok.eos_token!r} (id {eos})"
    assert said == [f"{line} in its place"] * 2  # once for each tokenizer


def test_float16_weights_that_overflow_name_the_nans_and_the_dtype():
    model = load_model("route-gpt2", device="cpu")
    prompts = model_run(model, n_prompts=1, seq_len=16).prompts
    model.half()  # on a CPU every logit of this model is NaN in float16
    for claim in (mask_prev_attention, rank_prev_heads):
        with pytest.raises(NonFiniteError) as e:
            claim(model, prompts, progress=False) if claim is rank_prev_heads else claim(model, prompts)
        msg = str(e.value)
        assert msg.startswith("the model's logits is not finite (") and "NaN" in msg, msg
        assert "computed in float16, the dtype of the model's weights; measure in float32" in msg


@pytest.fixture(scope="module")
def pythia(tmp_path_factory, small_tokenizer):
    return random_arch_dir(tmp_path_factory.mktemp("pythia"), "pythia", small_tokenizer, n_ctx=32)


def test_the_fast_engine_on_a_rotary_model_is_one_line(pythia, tmp_path):
    model = load_model(pythia)
    with pytest.raises(ValueError, match=r"^engine: 'fast' cannot run this model: positional embeddings are not"):
        prev_token_ranking(model, torch.randint(1, 100, (2, 16)), engine="fast")
    args = ["rank_prev_heads", "--model-dir", str(pythia), "--engine", "fast", "--n-prompts", "2", "--seq-len", "16"]
    r = subprocess.run(
        [sys.executable, "-m", "gpt2_posheads", *args, "--out", str(tmp_path / "out")], capture_output=True, text=True
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: --engine: 'fast' cannot run this model: positional")

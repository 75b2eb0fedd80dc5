"""The library checks its public arguments before any work: a layer is an ``int`` or a 0-d integer tensor in range
(never a bool, a float or a string), heads are names or pairs within the model, a model is a TransformerLens model
(a plain Hugging Face model is named, with how to load it), a ranking is not empty. Each mistake is a
``TypeError``/``ValueError`` naming the argument."""

import numpy as np
import pandas as pd
import pytest
import torch

from gpt2_posheads import (
    choose_aggregator,
    diagonal_attention,
    extended_pos_embeddings,
    head_table,
    induction_scores,
    mask_previous_attention,
    prev_token_ranking,
    score_profile,
)
from gpt2_posheads.model.validation import as_index, check_heads, check_layer, check_model


@pytest.fixture(scope="module")
def hf_model():
    """A plain transformers GPT-2 (what a user who has not read the README passes)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8))


@pytest.mark.parametrize(
    "value, error, words",
    [
        (True, TypeError, "layer must be an integer, got a bool"),
        (np.bool_(False), TypeError, "got a bool"),
        (2.5, TypeError, "layer must be an integer, got float (2.5)"),
        (2.0, TypeError, "got float"),
        ("1", TypeError, "got str ('1')"),
        (torch.tensor([1]), TypeError, "shape (1,)"),
        (torch.tensor(1.0), TypeError, "dtype torch.float32"),
        (None, TypeError, "got NoneType"),
        (3, ValueError, "layer: 3 is out of range; allowed 0..2"),
        (-1, ValueError, "layer: -1 is out of range; allowed 0..2"),
        (torch.tensor(7), ValueError, "layer: 7 is out of range"),
    ],
)
def test_a_layer_is_an_integer_in_range(tiny_model, value, error, words):
    with pytest.raises(error) as e:
        check_layer(tiny_model, value)
    assert words in str(e.value)


def test_integer_layers_of_every_kind_are_the_same_layer(tiny_model):
    assert [check_layer(tiny_model, v) for v in (1, torch.tensor(1), np.int64(1), torch.tensor(1, dtype=torch.int32))]
    assert {type(check_layer(tiny_model, v)) for v in (1, torch.tensor(1), np.int64(1))} == {int}
    assert check_layer(tiny_model, 3, allow_final=True) == 3  # the final residual stream
    assert as_index("head", np.int32(4)) == 4


@pytest.mark.parametrize("layer", [2.5, "1", True, torch.tensor([1])])
def test_extended_pos_embeddings_refuses_a_layer_that_is_not_an_integer(tiny_model, layer):
    with pytest.raises(TypeError, match="^layer must be an integer"):
        extended_pos_embeddings(tiny_model, layer=layer, n_prompts=2, seq_len=8)


def test_extended_pos_embeddings_takes_an_integer_tensor_as_the_layer(tiny_model):
    a = extended_pos_embeddings(tiny_model, layer=1, n_prompts=2, seq_len=8)
    b = extended_pos_embeddings(tiny_model, layer=torch.tensor(1), n_prompts=2, seq_len=8)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match=r"layer: 4 is out of range; allowed 0\.\.3"):
        extended_pos_embeddings(tiny_model, layer=4, n_prompts=2, seq_len=8)


def test_a_plain_hugging_face_model_is_named_with_how_to_load_it(hf_model, tiny_model):
    toks = torch.randint(0, 16, (2, 8))
    calls = [
        lambda m: extended_pos_embeddings(m, layer=0),
        lambda m: prev_token_ranking(m, toks),
        lambda m: diagonal_attention(m, toks),
        lambda m: head_table(m, toks),
        lambda m: induction_scores(m),
        lambda m: score_profile(m, toks),
        lambda m: mask_previous_attention(5, [0]).hooks(m),
        check_model,
    ]
    for call in calls:
        with pytest.raises(TypeError) as e:
            call(hf_model)
        msg = str(e.value)
        assert msg.startswith("model: a Hugging Face GPT2LMHeadModel is not a TransformerLens model") and (
            "gpt2_posheads.load_model(" in msg
        ), msg
    with pytest.raises(TypeError, match="model: must be a TransformerLens HookedTransformer or TransformerBridge"):
        check_model(object())
    assert check_model(tiny_model) is tiny_model


def test_heads_are_names_or_pairs_within_the_model(tiny_model):
    assert check_heads(tiny_model, ["L1H2", (2, torch.tensor(3))]) == [(1, 2), (2, 3)]
    assert check_heads(tiny_model, "L0H0") == [(0, 0)] and check_heads(tiny_model, (2, 1)) == [(2, 1)]
    for heads, error, words in [
        ([], ValueError, "heads: is empty"),
        (["L9H0"], ValueError, "unknown head L9H0"),
        (["X1"], ValueError, "is not a head name"),
        ([(1, 9)], ValueError, "head: 9 is out of range; allowed 0..3"),
        ([(True, 1)], TypeError, "got a bool"),
        ([1.5], TypeError, "heads: 1.5 is not a head"),
        (7, TypeError, "heads must be a list of heads"),
    ]:
        with pytest.raises(error, match=None) as e:
            check_heads(tiny_model, heads)
        assert words in str(e.value), (heads, str(e.value))


def test_choose_aggregator_refuses_an_empty_or_foreign_ranking(tiny_model):
    ranking = prev_token_ranking(tiny_model, torch.randint(1, 100, (2, 16)), progress=False)
    with pytest.raises(ValueError, match="^ranking is empty"):
        choose_aggregator(ranking.iloc[:0])
    with pytest.raises(ValueError, match="^ranking lacks the columns is_prev_token"):
        choose_aggregator(ranking.drop(columns="is_prev_token"))
    with pytest.raises(TypeError, match="^ranking must be a DataFrame"):
        choose_aggregator([(0, 0)])
    assert choose_aggregator(pd.DataFrame(ranking)) == choose_aggregator(ranking)

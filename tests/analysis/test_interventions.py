import pytest
import torch

from gpt2_posheads.analysis.interventions import (
    average_ext_pos_embed,
    average_pos_embed,
    edit_head_pattern,
    group_average_rows,
    hooks_for,
    mask_previous_attention,
    scale_head_output,
)
from gpt2_posheads.analysis.measures import head_patterns, kl_divergence, next_token_probs, pattern_distance


def _toks(model, n=2, pos=24, seed=0):
    return torch.randint(0, model.cfg.d_vocab, (n, pos), generator=torch.Generator().manual_seed(seed))


def _run(model, toks, hooks=()):
    with torch.inference_mode():
        return model.run_with_hooks(toks, fwd_hooks=list(hooks))


def test_group_average_rows_known_values():
    x = torch.arange(7.0)[:, None].repeat(1, 2)
    y = group_average_rows(x, 3)
    torch.testing.assert_close(y[:, 0], torch.tensor([1.0, 1, 1, 4, 4, 4, 6]))
    torch.testing.assert_close(group_average_rows(x, 1), x)


def test_group_size_one_is_identity(tiny_model):
    toks = _toks(tiny_model)
    torch.testing.assert_close(_run(tiny_model, toks, average_pos_embed(1).hooks(tiny_model)), _run(tiny_model, toks))
    torch.testing.assert_close(
        _run(tiny_model, toks, average_ext_pos_embed(1, 1, n_prompts=2).hooks(tiny_model)),
        _run(tiny_model, toks),
        atol=1e-5,
        rtol=1e-5,
    )


def test_average_pos_embed_changes_output_and_matches_manual(tiny_model):
    toks = _toks(tiny_model)
    hooks = average_pos_embed(4).hooks(tiny_model)
    assert (_run(tiny_model, toks, hooks) - _run(tiny_model, toks)).abs().max() > 1e-4
    seen = {}

    def grab(x, hook):
        seen["x"] = x.detach().clone()

    _run(tiny_model, toks, hooks + [("blocks.0.hook_resid_pre", grab)])
    W = tiny_model.W_pos.detach()
    expect = tiny_model.W_E.detach()[toks] + W[0:4].mean(0)
    torch.testing.assert_close(seen["x"][:, 0:4], expect[:, 0:4], atol=1e-5, rtol=1e-5)


def test_mask_previous_attention_touches_only_chosen_entries(tiny_model):
    toks = _toks(tiny_model, pos=23)
    heads = [(0, h) for h in range(4)] + [(1, 0)]
    iv = mask_previous_attention(every=5, layers=[0])
    clean = head_patterns(tiny_model, toks[0], heads)
    masked = head_patterns(tiny_model, toks[0], heads, [iv])
    zeroed = {(p, p - 1) for p in range(5, 23, 5)}
    for h in range(4):
        c, m = clean[(0, h)], masked[(0, h)]
        for q, k in zeroed:
            assert m[q, k] == 0 and c[q, k] > 0
        diff = (c - m).abs()
        for q, k in zeroed:
            diff[q, k] = 0
        assert diff.max() == 0  # layer 0: nothing else changed, not even the other entries of masked rows
    assert (clean[(1, 0)] - masked[(1, 0)]).abs().max() > 0  # a later layer feels it
    ren = head_patterns(tiny_model, toks[0], [(0, 1)], [mask_previous_attention(5, [0], renormalize=True)])
    torch.testing.assert_close(ren[(0, 1)].sum(-1), torch.ones(23))


def test_edit_one_hot_copies_value_vector(tiny_model):
    toks = _toks(tiny_model, n=1, pos=12)
    layer, head, q, k = 1, 2, 9, 3
    seen = {}

    def grab(name):
        def hook(x, hook):
            seen[name] = x.detach().clone()

        return hook

    hooks = edit_head_pattern(layer, head, {q: k}).hooks(tiny_model)
    _run(
        tiny_model,
        toks,
        hooks
        + [
            (f"blocks.{layer}.attn.hook_v", grab("v")),
            (f"blocks.{layer}.attn.hook_z", grab("z")),
            (f"blocks.{layer}.attn.hook_pattern", grab("pattern")),
        ],
    )
    assert seen["pattern"][0, head, q].tolist() == [1.0 if j == k else 0.0 for j in range(12)]
    torch.testing.assert_close(seen["z"][0, q, head], seen["v"][0, k, head])


def test_scale_head_output_scales_its_write(tiny_model):
    toks = _toks(tiny_model, n=1, pos=10)
    layer, head = 2, 1
    base = {}

    def grab(name, d):
        def hook(x, hook):
            d[name] = x.detach().clone()

        return hook

    names = [(f"blocks.{layer}.hook_attn_out", "out")]
    _run(tiny_model, toks, [(n, grab(k, base)) for n, k in names])
    zero = {}
    _run(
        tiny_model, toks, scale_head_output(layer, head, 0.0).hooks(tiny_model) + [(n, grab(k, zero)) for n, k in names]
    )
    three = {}
    _run(
        tiny_model,
        toks,
        scale_head_output(layer, head, 3.0).hooks(tiny_model) + [(n, grab(k, three)) for n, k in names],
    )
    head_write = base["out"] - zero["out"]
    torch.testing.assert_close(three["out"] - zero["out"], 3 * head_write, atol=1e-5, rtol=1e-4)


def test_kl_zero_for_identity_positive_otherwise(tiny_model):
    toks = _toks(tiny_model, n=3, pos=20)
    assert kl_divergence(tiny_model, toks, [average_pos_embed(1)]) == pytest.approx(0, abs=1e-7)
    assert kl_divergence(tiny_model, toks, [average_pos_embed(10)]) > 0
    p = next_token_probs(tiny_model, toks[0])
    assert p.shape == (1, tiny_model.cfg.d_vocab) and abs(float(p.sum()) - 1) < 1e-4


def test_pattern_distance_identities():
    a = torch.tensor([[1.0, 0], [0.5, 0.5]])
    b = torch.tensor([[1.0, 0], [1.0, 0.0]])
    assert pattern_distance(a, a) == {"mean_abs_diff": 0.0, "js_divergence": 0.0}
    d = pattern_distance(a, b)
    assert d["mean_abs_diff"] == pytest.approx(1.0 / 3)
    assert 0 < d["js_divergence"] <= 0.6932


def test_bad_input(tiny_model):
    with pytest.raises(ValueError, match="group_size"):
        average_pos_embed(0)
    with pytest.raises(ValueError, match="group_size"):
        average_ext_pos_embed(1, 0)
    with pytest.raises(ValueError, match="head"):
        scale_head_output(0, 4, 2.0).hooks(tiny_model)
    with pytest.raises(ValueError, match="layer"):
        edit_head_pattern(3, 0, {2: 1}).hooks(tiny_model)
    with pytest.raises(ValueError, match="layers entry"):
        mask_previous_attention(5, layers=[0, 7]).hooks(tiny_model)
    with pytest.raises(ValueError, match="causal"):
        edit_head_pattern(0, 0, {2: 5})
    with pytest.raises(ValueError, match="every"):
        mask_previous_attention(every=0)
    assert len(hooks_for(tiny_model, average_pos_embed(2), scale_head_output(0, 0, 2.0))) == 2


def test_an_intervention_is_data_each_analysis_takes_as_edits(tiny_model):
    """What it edits and where, read off the intervention itself; applied through an analysis's ``edits`` it moves the
    pattern exactly as its TransformerLens hooks do, and the hooks themselves are not an edit."""
    iv = mask_previous_attention(5, [0, 1])
    assert (iv.site, iv.layers) == ("pattern", (0, 1))
    assert (scale_head_output(1, 2, 0.5).site, average_pos_embed(4).site) == ("z", "pos_embed")
    toks = _toks(tiny_model, 1)
    got = head_patterns(tiny_model, toks[0], [(1, 0)], [iv])[(1, 0)]
    box = {}
    hooks = hooks_for(tiny_model, iv) + [("blocks.1.attn.hook_pattern", lambda p, hook: box.setdefault("p", p[0, 0]))]
    _run(tiny_model, toks, hooks)
    assert torch.equal(got, box["p"].float()) and float(got[5, 4]) == 0.0
    with pytest.raises(TypeError, match="edits: interventions"):
        head_patterns(tiny_model, toks[0], [(1, 0)], iv.hooks(tiny_model))

"""A researcher's own model object, measured as given or said (``gpt2_posheads.model.state``): a model left in
training mode with dropout, hooks left on it, bfloat16 weights; and a factor of the edit that no model can carry.
Each through a claim function and an analysis as a notebook calls them, and through what a command writes: the
results folder and the page."""

import math

import pandas as pd
import pytest
import torch

from gpt2_posheads import diagonal_attention, load_model
from gpt2_posheads.claims.record import read_summary
from gpt2_posheads.cli import main_entry
from gpt2_posheads.cli.output import Output
from gpt2_posheads.model.engine_fast import FastPathUnsupported
from gpt2_posheads.model.state import FORCE_ENV, ModelStateWarning
from gpt2_posheads.posts.gpt2_prev_heads import edit, l4h11_edit, model_run, rank_prev_heads
from gpt2_posheads.report.index import write_index

from conftest import load_script

# what the precision policy says of every half-precision ranking, whether --bf16 or the weights made it so
MOVES_MASSES = "which moved sharp heads' masses by up to 0.5 on the shipped compiled models"


@pytest.fixture(scope="module")
def route():
    return load_model("route-gpt2", device="cpu")


@pytest.fixture(scope="module")
def prompts(route):
    return model_run(route, n_prompts=8, seq_len=64).prompts


@pytest.fixture(scope="module")
def clean(route, prompts):
    """The ranking of the model as loaded: float32, eval mode, no hooks (the fast path verified on it)."""
    return rank_prev_heads(route, prompts, progress=False)


def verdicts(result) -> dict[str, str]:
    return {c.key: c.verdict for c in result.claims}


def flags(model) -> dict[str, bool]:
    return {name: m.training for name, m in model.named_modules()}


def test_a_model_in_training_mode_is_measured_in_eval_mode_and_handed_back(route, prompts, clean):
    """Dropout at 0.3 made two identical calls give two rankings (sharpest ratio 0.71 and 0.61, both not held); in
    eval mode both are the model's own, the caller's flags (one block left in eval mode among training ones) come back
    as they were, on an error too, and the result says so."""
    dropouts = [m for m in route.modules() if isinstance(m, torch.nn.Dropout)]
    before = [d.p for d in dropouts]
    route.train()
    route.blocks[0].eval()
    for d in dropouts:
        d.p = 0.3
    try:
        given = flags(route)
        first = rank_prev_heads(route, prompts, progress=False)
        second = rank_prev_heads(route, prompts, progress=False)
        assert flags(route) == given
        for r in (first, second):
            pd.testing.assert_frame_equal(r.tables["ranking"], clean.tables["ranking"])
            assert verdicts(r) == verdicts(clean) and "training mode" in " ".join(r.notes)
        with pytest.warns(ModelStateWarning, match="diagonal_attention: the model was in training mode"):
            diag = diagonal_attention(route, prompts, progress=False)
            again = diagonal_attention(route, prompts, progress=False)
        assert flags(route) == given
        torch.testing.assert_close(diag, again, rtol=0, atol=0, equal_nan=True)  # NaN: offsets no prompt reaches
        with pytest.raises(ValueError):  # fails inside the measurement: out-of-vocabulary token ids
            diagonal_attention(route, torch.full_like(prompts, route.cfg.d_vocab), progress=False)
        assert flags(route) == given
    finally:
        for d, p in zip(dropouts, before):
            d.p = p
        route.eval()
    assert rank_prev_heads(route, prompts, progress=False).notes == []


def test_hooks_left_on_the_model_are_measured_with_and_named(route, prompts, clean, tmp_path):
    """A hook zeroing layer 0's patterns, added after the fast path was verified on the model: it is measured with
    (the fast path, which would skip it, steps aside), named in the result, its summary.json and its page cell, and
    left on the model."""
    assert verdicts(clean)["sharp_prev_head"] == "held"
    route.add_hook("blocks.0.attn.hook_pattern", lambda pattern, hook: pattern * 0)
    try:
        hooked = rank_prev_heads(route, prompts, progress=False)
        assert route.hook_dict["blocks.0.attn.hook_pattern"].fwd_hooks  # still there
        assert verdicts(hooked)["sharp_prev_head"] == "not held"  # layer 0's heads feed the sharp head
        assert any("hooks the model carries on blocks.0.attn.hook_pattern" in n for n in hooked.notes)
        with pytest.raises(FastPathUnsupported, match=r"cannot run the hooks the model carries \(on blocks.0.attn"):
            diagonal_attention(route, prompts, engine="fast", progress=False)
        folder = tmp_path / "results" / "rank_prev_heads" / "route-gpt2"
        hooked.write(Output.open(folder, "rank_prev_heads", png=False), {"model": "route-gpt2"})
        assert read_summary(folder / "summary.json").get("notes") == hooked.notes
        page = write_index(tmp_path / "results").read_text(encoding="utf-8")
        assert page.count("note: measured with the hooks the model carries on blocks.0.attn.hook_pattern") == 3
    finally:
        route.reset_hooks(including_permanent=True)
    again = rank_prev_heads(route, prompts, progress=False)
    pd.testing.assert_frame_equal(again.tables["ranking"], clean.tables["ranking"])


def test_a_bfloat16_model_follows_the_policy_of_bf16(tmp_path, monkeypatch):
    """A model cast to bfloat16 was judged held, held, held; its ranking claims are not testable as the command's
    --bf16 makes them (one rule, one wording), naming the dtype and the way back to float32."""
    model = load_model("mini-gpt2", device="cpu").to(torch.bfloat16)
    r = rank_prev_heads(model, model_run(model, n_prompts=2, seq_len=32).prompts, progress=False)
    assert set(verdicts(r).values()) == {"not testable"}
    assert all("computed in bfloat16, the dtype of the model's weights" in c.why for c in r.claims)
    assert all(MOVES_MASSES in c.why and "model.float()" in c.why for c in r.claims)
    assert any("bfloat16" in n for n in r.notes)
    monkeypatch.setenv(FORCE_ENV, "1")  # bfloat16 matmuls on any CPU
    out = tmp_path / "bf16"
    argv = ["--model", "mini-gpt2", "--bf16", "--n-prompts", "2", "--seq-len", "32", "--out", str(out), "--no-png"]
    main_entry(load_script("rank_prev_heads").main, argv)
    claims = read_summary(out / "summary.json").claims
    assert {c.verdict for c in claims} == {"not testable"}
    assert all("computed with bfloat16 matmuls" in c.why and MOVES_MASSES in c.why for c in claims)


def test_an_absurd_factor_is_refused_and_an_overflowing_row_is_that_rows_alone(route, prompts, monkeypatch):
    """``factors=(1e308, 2)`` made the whole claim not testable, blaming the model's logits: the factor is refused,
    naming its range; and a factor that does overflow leaves its own row not measured while x2 is judged."""
    run = model_run(route, prompts)
    with pytest.raises(ValueError, match=r"^factors: 1e\+308 is out of range; allowed 0\.\.1e6"):
        l4h11_edit(run=run, factors=(1e308, 2))
    monkeypatch.setattr(edit, "MAX_FACTOR", math.inf)
    r = l4h11_edit(run=run, factors=(1e308, 2))
    rows = {row["factor"]: row for row in r.numbers["rows"]}
    assert "the model's logits is not finite" in rows[1e308]["not_measured"] and "not_measured" not in rows[2.0]
    assert r.claim("edit_moves_copy").verdict == "held"  # route-gpt2's known answer, on the x2 row

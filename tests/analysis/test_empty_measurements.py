"""A measurement with nothing in it is NaN with the reason beside it, never a placeholder number: a two-token prompt
has no previous diagonal once key 0 is left out, a one-token (BOS-only) prompt has no diagonal at all, a head that
puts everything on BOS has no ratio. The aggregator is then not chosen (no head would be more than arbitrary), and a
script ends with every claim ``not testable`` and the reason."""

import json

import pandas as pd
import pytest
import torch

from gpt2_posheads import choose_aggregator, prev_token_ranking, rank_from_diagonals
from gpt2_posheads.analysis.diagonals import NO_DIAGONAL, NO_PREVIOUS, ONLY_BOS, prev_token_stats
from gpt2_posheads.cli import main_entry
from gpt2_posheads.model.validation import NothingMeasuredError

from conftest import HANDSET, load_script

NAN = float("nan")
NUMBERS = ["top_mass", "second_mass", "ratio", "prev_mass"]


def test_unmeasured_diagonals_are_nan_with_the_reason():
    # [layer, head, offset]: measured, a two-token prompt (offset 1 empty), a one-token prompt, all on BOS
    diag = torch.tensor(
        [
            [[0.2, 0.7, 0.1], [0.5, NAN, NAN]],
            [[NAN, NAN, NAN], [0.0, 0.0, 0.0]],
        ]
    )
    st = prev_token_stats(diag)
    assert not any((st[k] < 0).any() for k in NUMBERS)  # no -1 ever leaves the statistics
    r = rank_from_diagonals(diag).set_index("name")
    assert r.loc["L0H0", "not_measured"] == "" and r.loc["L0H0", "ratio"] == pytest.approx(0.2 / 0.7)
    assert r.loc["L0H1", "not_measured"] == NO_PREVIOUS and r.loc["L0H1", "top_mass"] == pytest.approx(0.5)
    assert r.loc["L0H1", ["second_mass", "ratio", "prev_mass"]].isna().all()
    assert r.loc["L1H0", "not_measured"] == NO_DIAGONAL and r.loc["L1H0", NUMBERS].isna().all()
    assert r.loc["L1H1", "not_measured"] == ONLY_BOS and pd.isna(r.loc["L1H1", "ratio"])
    assert r.loc["L1H1", "prev_mass"] == 0.0  # measured: none of its attention is on the previous token
    assert list(r[r.is_prev_token].index) == ["L0H0"]
    assert choose_aggregator(rank_from_diagonals(diag)) == (0, 0)


@pytest.mark.parametrize("n_tokens, reason", [(2, NO_PREVIOUS), (1, NO_DIAGONAL)])
def test_short_prompts_give_no_aggregator_and_no_placeholder(handset_model, n_tokens, reason):
    """On the hand-built model (L0H0 attends to the previous position), prompts too short for a previous diagonal:
    every head's ratio and previous-token mass are NaN with the reason, none is a previous-token head, and the
    aggregator is refused rather than returned as an arbitrary (0, 0)."""
    toks = torch.randint(1, 100, (3, n_tokens), generator=torch.Generator().manual_seed(0))
    r = prev_token_ranking(handset_model, toks, max_offset=1, progress=False)
    assert len(r) == HANDSET["n_layers"] * HANDSET["n_heads"]
    assert set(r.not_measured) == {reason} and not r.is_prev_token.any()
    assert r[["ratio", "prev_mass", "second_mass"]].isna().all().all()
    assert not (r[NUMBERS].fillna(0) < 0).any().any()
    with pytest.raises(NothingMeasuredError, match="no head has attention off BOS on the previous token") as e:
        choose_aggregator(r)
    assert isinstance(e.value, ValueError) and reason in str(e.value)
    # three tokens are enough: the known previous-token head is found
    longer = prev_token_ranking(handset_model, torch.randint(1, 100, (3, 3)), progress=False)
    assert choose_aggregator(longer) == (0, 0) and (longer.not_measured == "").all()


def test_a_script_at_seq_len_2_writes_nan_and_judges_nothing(tiny_dir, tmp_path, capsys):
    """``prev_token_ranking --seq-len 2``: exit status 0, every claim ``not testable`` with the reason, and ranking.csv
    holds NaN with the reason (no -1 placeholder, no negative ratio)."""
    argv = ["--model-dir", str(tiny_dir), "--prompts", "wikitext", "--n-prompts", "2", "--seq-len", "2"]
    assert main_entry(load_script("rank_prev_heads").main, argv + ["--out", str(tmp_path), "--no-png"]) == 0
    assert "not testable: ranking: no head has attention off BOS" in capsys.readouterr().err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["claims"] and {c["verdict"] for c in summary["claims"]} == {"not testable"}
    assert all(NO_PREVIOUS in c["why"] for c in summary["claims"])
    ranking = pd.read_csv(tmp_path / "ranking.csv")
    assert ranking[["ratio", "prev_mass", "second_mass"]].isna().all().all()
    assert not (ranking[NUMBERS].fillna(0) < 0).any().any() and set(ranking.not_measured) == {NO_PREVIOUS}

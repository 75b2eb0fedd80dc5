"""The organism's training data and loop: hand-checkable facts of each window kind, exact resumes."""

import json

import pytest
import torch

from gpt2_posheads.organism import MiniConfig, train_mini_gpt2
from gpt2_posheads.organism.data import (
    position_ids,
    repeated_segments,
    repeated_span,
    skip_bigram_windows,
    skip_table,
    training_batch,
)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_skip_bigram_rules_without_noise():
    copy = skip_bigram_windows(4, 40, skip_table(50, 0, "copy"), 0.0, gen())
    assert (copy[:, 0] == 0).all() and (copy[:, 3:] == copy[:, 1:-2]).all()  # t+1 = t-1
    pi = skip_table(50, 0)
    assert sorted(pi[1:].tolist()) == list(range(1, 50)) and not torch.equal(pi, torch.arange(50))
    perm = skip_bigram_windows(4, 40, pi, 0.0, gen())
    assert (perm[:, 3:] == pi[perm[:, 1:-2]]).all()
    with pytest.raises(ValueError, match="skip rule"):
        skip_table(50, 0, "shift")


def test_repeated_span_copies_one_span_right_after_itself():
    x = repeated_span(64, 49, 4096, 6, 20, gen())
    assert (x[:, 0] == 0).all() and x[:, 1:].min() >= 1
    gaps = set()
    for row in x.tolist():
        found = [
            (a, n)
            for n in range(20, 5, -1)
            for a in range(1, 49 - 2 * n + 1)
            if row[a : a + n] == row[a + n : a + 2 * n]
        ]
        assert found, row  # with 4,095 ids a chance repeat of 6+ tokens is practically impossible: it is the copy
        gaps.add(found[0][0])
    assert len(gaps) > 10  # the copy sits at many places: no fixed positional offset predicts it


def test_repeated_segments_pairs():
    x = repeated_segments(3, 33, 100, 16, 16, gen())
    assert torch.equal(x[:, 1:17], x[:, 17:33])


def test_position_offsets_only_for_short_synthetic_windows():
    cfg = MiniConfig(n_ctx=64, batch_size=2, synthetic_steps=5, synthetic_ctx=16, position_offsets=True)
    xb = training_batch(cfg, torch.arange(1000), 0, bos=0)
    pos = position_ids(cfg, 0, xb)
    assert pos.shape == (xb.shape[0], 16) and (pos[:, 1:] - pos[:, :-1] == 1).all()
    assert pos.min() >= 0 and pos.max() <= 63 and len(set(pos[:, 0].tolist())) > 1
    assert torch.equal(pos, position_ids(cfg, 0, xb))  # a function of the step: resumes are exact
    assert position_ids(cfg, 5, xb) is None  # text phase
    assert (
        position_ids(MiniConfig(n_ctx=64, synthetic_steps=5, synthetic_ctx=16, position_offsets=False), 0, xb) is None
    )
    assert torch.equal(
        training_batch(cfg, torch.arange(1000), 3, bos=0), training_batch(cfg, torch.arange(1000), 3, bos=0)
    )
    with pytest.raises(ValueError, match="repeat kind 'spans'"):
        training_batch(
            MiniConfig(
                n_ctx=64, batch_size=2, synthetic_steps=5, synthetic_ctx=16, skip_only_steps=0, repeat_kind="spans"
            ),
            torch.arange(1000),
            0,
            bos=0,
        )


def test_training_resumes_exactly(tmp_path):
    docs = [f"the cat {i} sat on the mat and the dog {i % 7} ran far away from it." * 3 for i in range(60)]
    cfg = dict(
        n_layers=1,
        n_heads=2,
        d_model=16,
        n_ctx=32,
        vocab_size=300,
        batch_size=2,
        lr=1e-3,
        warmup=1,
        synthetic_steps=2,
        synthetic_ctx=8,
        position_offsets=True,
        skip_fraction=0.5,
        skip_rule="copy",
        skip_vocab=64,
        synthetic_vocab=64,
        repeat_kind="span",
        seg_min=2,
        seg_max=4,
        probe_every=2,
        checkpoint_minutes=0.0,
    )
    straight = train_mini_gpt2(docs, tmp_path / "a", MiniConfig(steps=4, **cfg), progress=False)
    train_mini_gpt2(docs, tmp_path / "b", MiniConfig(steps=2, **cfg), progress=False)
    resumed = train_mini_gpt2(docs, tmp_path / "b", MiniConfig(steps=4, **cfg), progress=False)
    assert (tmp_path / "b-work" / "checkpoint.pt").exists()
    assert [l for _, l in resumed["loss"]] == pytest.approx([l for _, l in straight["loss"]], rel=1e-5)
    rec = json.loads((tmp_path / "b" / "training.json").read_text())
    assert rec["config"]["steps"] == 4 and len(rec["probes"]) == 2


def test_pos_averaging_augmentation_schedule():
    """Steps before ``pos_avg_start`` never average; after it about ``pos_avg_prob`` of them do, each with a group
    size in 2..pos_avg_max and an offset below it, the same on every call (resumes see the same schedule)."""
    from gpt2_posheads.organism.train import pos_average_at

    cfg = MiniConfig(pos_avg_prob=0.5, pos_avg_max=20, pos_avg_start=300)
    draws = [pos_average_at(cfg, s) for s in range(1300)]
    assert all(d is None for d in draws[:300])
    on = [d for d in draws[300:] if d is not None]
    assert 400 <= len(on) <= 600  # 1,000 steps at chance 0.5
    assert all(2 <= g <= 20 and 0 <= off < g for g, off in on)
    assert {g for g, _ in on} == set(range(2, 21))
    assert draws == [pos_average_at(cfg, s) for s in range(1300)]
    assert all(pos_average_at(MiniConfig(), s) is None for s in range(100))  # off by default

import json
import math

import pytest
import torch

from gpt2_posheads.claims.toy import plateau, plateaus, spearman
from gpt2_posheads.toy import ToyConfig, attention_scores, effective_rank, targets, train_group, train_sweep
from gpt2_posheads.toy.analysis import (
    distance_rank_correlation,
    loss_spikes,
    pairing,
    relative_perplexity,
    same_cyclic_order,
    separation_direction,
)


def test_task_targets_hand_checked():
    x = torch.tensor([[1, 5, 10, 6], [3, 0, 2, 9]])
    assert targets("copy_current", x).tolist() == [6, 9]
    assert targets("copy_offset", x, k=1).tolist() == [10, 2]
    assert targets("copy_offset", x, k=3).tolist() == [1, 3]
    assert targets("kth_token", x, k=1).tolist() == [5, 0]
    assert targets("most_similar", x).tolist() == [5, 3]  # post's example: [1][5][10][6] -> [5]
    # ties between different values go to the smaller value; an equal token wins (distance 0)
    assert targets("most_similar", torch.tensor([[7, 5, 6], [4, 6, 6]])).tolist() == [5, 6]


def test_bad_configs():
    with pytest.raises(ValueError, match="C=1"):
        ToyConfig(C=1).validate()
    with pytest.raises(ValueError, match="k=4"):
        ToyConfig(task="kth_token", C=4, k=4).validate()
    with pytest.raises(ValueError, match="k=None"):
        ToyConfig(task="copy_offset", C=4).validate()
    with pytest.raises(ValueError, match="n_embd=0"):
        ToyConfig(n_embd=0).validate()
    with pytest.raises(ValueError, match="kernel"):
        ToyConfig(kernel="cosine").validate()
    with pytest.raises(ValueError, match="task"):
        ToyConfig(task="copy_everything").validate()


def test_effective_rank_known_matrices():
    assert effective_rank(torch.eye(5)) == pytest.approx(5.0)
    assert effective_rank(torch.outer(torch.arange(1.0, 4), torch.arange(1.0, 5))) == pytest.approx(1.0, abs=1e-6)
    assert effective_rank(torch.diag(torch.tensor([1.0, 1.0, 0.0]))) == pytest.approx(2.0)
    assert relative_perplexity(0.0, 10) == 0.0
    assert relative_perplexity(math.log(11), 10) == pytest.approx(1.0)
    # a loss past exp's range (a diverged run) is an infinite perplexity, not an OverflowError ending the sweep
    assert relative_perplexity(1e4, 10) == math.inf
    assert math.isfinite(relative_perplexity(709.0, 10))


def test_distance_kernels_on_hand_vectors():
    q = torch.tensor([[0.0, 0.0]])
    k = torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]])
    torch.testing.assert_close(attention_scores(q, k, "dot"), torch.tensor([[0.0, 0.0, 0.0]]))
    torch.testing.assert_close(attention_scores(q, k, "distance"), torch.tensor([[0.0, -25.0, -1.0]]))
    h = attention_scores(q, k, "harmonic", harmonic_n=2.0)
    # softmax of -n log|q-k| is proportional to 1/|q-k|^n: the ratio of the weights of keys 2 and 1 is (5/1)^2
    assert float((h[0, 2] - h[0, 1]).exp()) == pytest.approx(25.0, rel=1e-4)
    q2 = torch.tensor([[1.0, 2.0]])
    torch.testing.assert_close(attention_scores(q2, k, "dot"), torch.tensor([[0.0, 11.0, 1.0]]) / math.sqrt(2))


@pytest.mark.parametrize("C", [4, 12, 40])
@pytest.mark.parametrize(
    "kernel, n_layers, extras",
    [
        ("dot", 2, {}),
        ("dot", 1, {"out_proj": True}),
        ("distance", 2, {"residual": True, "mlp": True}),
        ("harmonic", 3, {"residual": True, "mlp": True, "layernorm": True, "out_proj": True}),
    ],
)
def test_forward_paths_agree(C, kernel, n_layers, extras):
    """The training path (last layer: the last query alone; earlier layers: leading-axis softmax for few keys,
    fused SDPA for many) computes the logits and gradients of the full path that records every pattern;
    the patterns are causal rows that sum to 1."""
    from gpt2_posheads.toy.model import ToyShape, forward, init_params

    shape = ToyShape(V=9, C=C, n_embd=6, n_layers=n_layers, n_heads=2, kernel=kernel, **extras)
    params = init_params(shape, [torch.Generator().manual_seed(i) for i in range(3)], 0.5)
    params = {n: p.requires_grad_(True) for n, p in params.items()}
    x = torch.randint(0, 9, (3, 5, C), generator=torch.Generator().manual_seed(1))
    logits = forward(params, x, shape)
    ref, patterns = forward(params, x, shape, return_pattern=True)  # every position, every pattern
    torch.testing.assert_close(logits, ref, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(logits.square().sum(), list(params.values()))
    ref_grads = torch.autograd.grad(ref.square().sum(), list(params.values()))
    for name, g, r in zip(params, grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4, msg=name)
    assert len(patterns) == n_layers
    for a in patterns:
        torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:-1]))
        assert float(a.triu(1).abs().max()) == 0.0


def test_causal_softmax_is_a_masked_softmax():
    """Future keys get exactly zero, and the rest is the softmax over the keys a query sees."""
    from gpt2_posheads.toy.model import causal_softmax

    for C in (3, 10, 20):  # the leading-axis softmax (few keys) and the last-axis one
        s = torch.randn(2, 5, 1, C, C, generator=torch.Generator().manual_seed(C))
        a = causal_softmax(s.clone())
        assert float(a.triu(1).abs().max()) == 0.0
        for q in range(C):
            torch.testing.assert_close(a[..., q, : q + 1], s[..., q, : q + 1].softmax(-1))


def test_adamw_step_matches_torch_adamw():
    """The trainer's element-wise AdamW, with a learning rate and weight decay per model, moves each model's
    parameters as ``torch.optim.AdamW`` moves that model alone."""
    from gpt2_posheads.toy.train import _adamw_step

    g = torch.Generator().manual_seed(0)
    shapes = {"W_E": (5, 3), "0.W_Q": (2, 3, 4), "b": (7,)}
    lrs, wds = [0.01, 0.1], [0.0, 0.05]
    params = {n: torch.randn(2, *sh, generator=g) for n, sh in shapes.items()}
    alone = [{n: p[i].clone().requires_grad_(True) for n, p in params.items()} for i in range(2)]
    opts = [torch.optim.AdamW(list(alone[i].values()), lr=lrs[i], weight_decay=wds[i]) for i in range(2)]
    state: dict = {}
    for t in range(1, 21):
        grads = {n: torch.randn(p.shape, generator=g) for n, p in params.items()}
        _adamw_step(params, grads, state, t, torch.tensor(lrs), torch.tensor(wds), (0.9, 0.999))
        for i in range(2):
            for n, p in alone[i].items():
                p.grad = grads[n][i].clone()
            opts[i].step()
    for i in range(2):
        for n, p in alone[i].items():
            torch.testing.assert_close(params[n][i], p.detach(), atol=1e-6, rtol=1e-5, msg=n)


def test_batched_sweep_matches_individual_training():
    cfgs = [
        ToyConfig(task="kth_token", V=6, C=5, n_embd=4, n_layers=2, k=k, seed=s, steps=60, log_every=20, lr=lr)
        for k, s, lr in [(0, 0, 0.01), (2, 1, 0.03), (4, 2, 0.01)]
    ]
    batched = train_group(cfgs, progress=False)
    for c, b in zip(cfgs, batched):
        alone = train_group([c], progress=False)[0]
        assert alone["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4, abs=1e-5)
        torch.testing.assert_close(
            torch.tensor(alone["params"]["0.W_Q"]), torch.tensor(b["params"]["0.W_Q"]), atol=1e-5, rtol=1e-4
        )
    assert batched[0]["eval_loss"] != batched[1]["eval_loss"]


def test_copy_current_seed_numbers():
    """Seed 0 numbers of a short run: the V=4 model is still on its plateau near perplexity V/2 = 2."""
    r = train_group([ToyConfig(V=4, C=4, n_embd=2, steps=300, log_every=100, seed=0)], progress=False)[0]
    assert r["steps"] == [100, 200, 300]
    assert 1.8 < r["final_perplexity"] < 2.2
    again = train_group([ToyConfig(V=4, C=4, n_embd=2, steps=300, log_every=100, seed=0)], progress=False)[0]
    assert again["eval_loss"] == r["eval_loss"]


def test_sweep_resumes_after_interruption(tmp_path):
    cfgs = [ToyConfig(V=v, C=3, n_embd=2, steps=20, log_every=10, seed=0) for v in (4, 5, 6)]

    class Stop(Exception):
        pass

    def stop_after_first(results):
        raise Stop

    with pytest.raises(Stop):
        train_sweep(cfgs, tmp_path, progress=False, on_group_done=stop_after_first)
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 1
    first = json.loads(files[0].read_text())
    mtime = files[0].stat().st_mtime_ns
    trained = []
    results = train_sweep(cfgs, tmp_path, progress=False, on_group_done=trained.append)
    assert len(trained) == 2  # the finished model was loaded, not retrained
    assert files[0].stat().st_mtime_ns == mtime
    assert [r["id"] for r in results] == [c.id() for c in cfgs]
    assert any(r["eval_loss"] == first["eval_loss"] for r in results)


def test_analysis_helpers():
    steps = list(range(0, 100, 10))
    ppl = [8, 8.1, 8.0, 7.9, 8.0, 4, 2, 1.1, 1.0, 1.0]
    pl = plateau(steps, ppl)
    assert pl["start_step"] == 0 and pl["end_step"] == 40 and pl["perplexity"] == pytest.approx(8.0)
    two = plateaus([0, 10, 20, 30, 40, 50, 60], [8, 8, 8, 4, 4, 4, 1], min_steps=15)
    assert [(p["start_step"], p["perplexity"]) for p in two] == [(0, 8.0), (30, 4.0)]
    assert loss_spikes([2, 1, 0.5, 0.4, 1.5, 0.3, 0.2, 0.9]) == [4, 7]
    assert same_cyclic_order([0, 1, 2, 3], [2, 3, 0, 1]) and same_cyclic_order([0, 1, 2, 3], [3, 2, 1, 0])
    assert not same_cyclic_order([0, 1, 2, 3], [0, 2, 1, 3])
    assert pairing(torch.tensor([[1.0, 0], [2.0, 0.01], [0, 1.0], [0.01, 3]])) == 2
    line = torch.arange(8.0)[:, None] * torch.tensor([[1.0, 0.5]])
    assert distance_rank_correlation(line) == pytest.approx(1.0)
    # ties share their average rank: ranks [1, 2.5, 2.5, 4] vs [1, 2, 3, 4] give 3 / sqrt(10)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))
    assert spearman([3, 2, 1], [10, 20, 30]) == pytest.approx(-1.0)
    pos = torch.tensor([[1.0, 1.0], [1.0, 1.0], [-1.0, -1.0], [1.0, 1.0]])
    torch.testing.assert_close(separation_direction(pos, 1), torch.tensor([-1.0, -1.0]) / math.sqrt(2))


def test_v_half_plateau_ignores_the_initial_phase():
    from functools import partial

    from gpt2_posheads.claims.toy import v_half_plateau
    from gpt2_posheads.posts.sticky_plateau.plateau import PLATEAU

    v_half_plateau = partial(v_half_plateau, **dict(PLATEAU.params))  # within ±20% of V/2, >= 5 points, after 0.8 V
    steps = list(range(0, 200, 10))
    V = 8
    start = [8.0, 7.9, 7.9, 7.8, 7.9]  # perplexity ~V at first: never the plateau
    curve = start + [4.1, 4.0, 3.9, 4.2, 4.0, 3.8] + [2.0, 1.2] + [1.01] * 7
    p = v_half_plateau(steps, curve, V)
    assert p is not None and p["start_step"] == 50 and p["n_points"] == 6
    assert v_half_plateau(steps, [8.0] * 20, V) is None  # never falls below 0.8 V
    assert v_half_plateau(steps, start + [4.0, 4.1] + [1.0] * 13, V) is None  # too short a stay at V/2
    assert v_half_plateau(steps, start + [2.0] * 15, V) is None  # falls past V/2 without stopping there


def test_sweep_in_worker_processes_matches_one_process(tmp_path):
    # three shapes (three groups) trained by two spawned 1-thread workers vs in this process
    cfgs = [ToyConfig(V=v, C=3, n_embd=2, steps=30, log_every=10, seed=s) for v in (4, 5, 6) for s in (0, 1)]
    here = train_sweep(cfgs, progress=False)
    there = train_sweep(cfgs, tmp_path, progress=False, workers=2)
    assert [r["id"] for r in there] == [c.id() for c in cfgs]
    for a, b in zip(here, there):
        assert b["eval_loss"] == pytest.approx(a["eval_loss"], abs=1e-6)
    assert len(list(tmp_path.glob("*.json"))) == len(cfgs)


def test_a_dominant_group_trains_here_with_every_thread(tmp_path, capsys):
    # one group is most of the work (10x the steps): it cannot be balanced, so it trains in this process
    # and only the two small groups go to the worker processes
    cfgs = [ToyConfig(V=4, C=3, n_embd=2, steps=300, log_every=100)] + [
        ToyConfig(V=v, C=3, n_embd=2, steps=30, log_every=10) for v in (5, 6)
    ]
    train_sweep(cfgs, tmp_path, workers=2)
    out = capsys.readouterr().out
    assert "group 1 of 3 (1 models)" in out and "2 groups in 2 processes" in out


def test_sweep_in_workers_stops_at_an_error_and_keeps_finished_groups(tmp_path):
    cfgs = [ToyConfig(V=v, C=3, n_embd=2, steps=20, log_every=10, seed=0) for v in (4, 5, 6, 7)]

    class Stop(Exception):
        pass

    def stop(results):
        raise Stop

    with pytest.raises(Stop):
        train_sweep(cfgs, tmp_path, progress=False, on_group_done=stop, workers=2)
    assert 1 <= len(list(tmp_path.glob("*.json"))) < len(cfgs)
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(ValueError, match="workers"):
        train_sweep(cfgs, workers=0)


def test_toy_options_are_checked_in_one_place_naming_the_keyword_or_the_flag():
    """``ToyRun.check`` is what a claim function (keywords) and a toy command (flags) both refuse with."""
    from gpt2_posheads.model.validation import UsageError
    from gpt2_posheads.toy.posts import ToyRun

    cases = [
        ({"steps": 0}, "steps: 0 is out of range; allowed an integer >= 1"),
        ({"batch_size": 2.5}, "batch_size: 2.5 is out of range; allowed an integer >= 1"),
        ({"workers": 1 << 63}, f"workers: {1 << 63} is out of range; allowed 1..{(1 << 63) - 1} (what torch takes)"),
        ({"lr": 0}, "lr: 0 is out of range; allowed > 0; e.g. 0.01"),
        ({"init_std": float("nan")}, "init_std: nan is out of range; allowed > 0; e.g. 0.02"),
    ]
    for options, message in cases:
        with pytest.raises(UsageError) as e:
            ToyRun.of("toy_lost_in_middle", options, steps=100, quick_steps=10)
        assert str(e.value) == message
        with pytest.raises(UsageError) as e:
            ToyRun.check({**vars(ToyRun()), **options}, lambda f: "--" + f.replace("_", "-"))
        field = next(iter(options))
        assert str(e.value) == message.replace(f"{field}:", "--" + field.replace("_", "-") + ":", 1)
    ToyRun.check(vars(ToyRun()))  # the defaults pass

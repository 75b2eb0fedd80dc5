"""One model, one measurement at a time (``gpt2_posheads.model.state``): TransformerLens keeps hooks on the model, so a
ranking taken while another thread masks attention on the same model used to read the other call's edits (masses
of 1.99, rankings that differ from the same call alone). Every public measurement holds the model's lock: calls from
threads give exactly the numbers they give alone, a call that waits says so once, other models are not held up."""

import inspect
import threading

import pandas as pd
import pytest
import torch

from gpt2_posheads import average_pos_embed, diagonal_attention, hooks_for, load_model, prev_token_ranking
from gpt2_posheads.model import state
from gpt2_posheads.model.state import model_lock
from gpt2_posheads.posts.gpt2_prev_heads import mask_prev_attention, model_run

HEADS = ["L2H0"]  # route-gpt2's previous-token head above the layers the mask edits


@pytest.fixture(scope="module")
def route():
    return load_model("route-gpt2", device="cpu")


@pytest.fixture(scope="module")
def prompts(route):
    return model_run(route, n_prompts=4, seq_len=48).prompts


def measured(route, prompts) -> dict:
    """Every measurement of the test, each as its caller reads it."""
    return {
        "ranking": lambda: prev_token_ranking(route, prompts, progress=False),
        "diag": lambda: diagonal_attention(route, prompts, progress=False),
        "mask": lambda: mask_prev_attention(route, prompts, heads=HEADS, start=0, size=16).numbers["results"],
        "hooks": lambda: [name for name, _ in hooks_for(route, average_pos_embed(10))],
    }


def same(a, b) -> bool:
    if isinstance(a, pd.DataFrame):
        return a.equals(b)
    if isinstance(a, torch.Tensor):  # equal, NaN where NaN (a diagonal with no entry)
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    return a == b


def test_threads_measuring_and_intervening_on_one_model_get_the_numbers_of_each_call_alone(route, prompts):
    calls = measured(route, prompts)
    alone = {k: f() for k, f in calls.items()}
    assert float(alone["ranking"].prev_mass.max()) <= 1.0 and alone["mask"][0]["rows_relative_drop"] > 0.5
    start = threading.Barrier(len(calls))
    got: dict = {k: [] for k in calls}
    errors: list = []

    def worker(key):
        try:
            start.wait()
            for _ in range(3):
                got[key].append(calls[key]())
        except Exception as e:  # noqa: BLE001 - any error of another call is the test's failure
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors and all(not t.is_alive() for t in threads)
    for key, results in got.items():
        assert len(results) == 3 and all(same(r, alone[key]) for r in results), key


def test_a_call_that_waits_says_so_once_and_then_measures(route, prompts, monkeypatch):
    said, waiting = [], threading.Event()

    def note(message):
        said.append(message)
        waiting.set()

    monkeypatch.setattr(state, "note", note)
    alone = diagonal_attention(route, prompts, progress=False)
    out = {}
    with model_lock(route):
        thread = threading.Thread(target=lambda: out.update(diag=diagonal_attention(route, prompts, progress=False)))
        thread.start()
        assert waiting.wait(timeout=120)
        assert thread.is_alive() and "diag" not in out  # it waits while this thread measures
        with model_lock(route):  # re-entrant: a measurement that calls another does not wait on itself
            pass
    thread.join(timeout=600)
    assert said == [f"model {route.cfg.model_name} is being measured by another call; waiting"]
    assert same(out["diag"], alone)


def test_another_model_is_not_held_up(route, tiny_model):
    toks = torch.randint(1, 100, (2, 16))
    out = {}
    with model_lock(route):
        thread = threading.Thread(target=lambda: out.update(d=diagonal_attention(tiny_model, toks, progress=False)))
        thread.start()
        thread.join(timeout=120)
        assert "d" in out


def test_a_claim_function_keeps_its_signature_help_and_declaration():
    params = inspect.signature(mask_prev_attention).parameters
    assert list(params)[:3] == ["model", "prompts", "heads"] and params["every"].default == 5
    assert mask_prev_attention.script.name == "mask_prev_attention"
    assert mask_prev_attention.script.function is mask_prev_attention
    assert "Mask attention to the previous position" in mask_prev_attention.__doc__

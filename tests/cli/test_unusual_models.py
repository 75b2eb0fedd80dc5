"""Every claim command on the models researchers train first: a character-level GPT-2 with a 32-token context (nanoGPT's
Shakespeare characters), a 50-token byte-pair vocabulary, and an 8-token context. Each command, run as a user runs it
(``--model-dir`` and nothing else), ends with exit 0 and a verdict for every claim, or exit 2 and one ``error:`` line:
never a traceback. A claim that is ``held`` or ``not held`` rests on measured, finite numbers; one that is not
testable says why. The models are random (no head is trained to anything), so the point is the class of input, not
the verdicts' direction."""

import math

import pytest
import torch

from gpt2_posheads.claims.catalogue import model_scripts
from gpt2_posheads.claims.record import read_summary
from gpt2_posheads.commands import run

FOLDERS = {  # name: (tokenizer fixture, n_ctx)
    "char-ctx32": ("char_tokenizer", 32),
    "bpe50-ctx64": ("bpe50_tokenizer", 64),
    "ctx8": ("small_tokenizer", 8),
}


@pytest.fixture(scope="module", autouse=True)
def one_load_per_model():
    """The commands of this module share each model, as the main job does (loaded once, its prompts made once)."""
    from gpt2_posheads.cli.experiment import shared_setup

    with shared_setup():
        yield


@pytest.fixture(scope="module")
def unusual(request, tmp_path_factory):
    from gpt2_posheads import make_random_model_dir

    dirs = {}
    for name, (tok, n_ctx) in FOLDERS.items():
        dirs[name] = make_random_model_dir(
            tmp_path_factory.mktemp(name),
            n_layers=3,
            n_heads=2,
            d_model=32,
            n_ctx=n_ctx,
            tokenizer=request.getfixturevalue(tok),
            seed=3,
        )
    return dirs


def _numbers(x):
    """Every number in a claim's measured value (nested dicts, lists, tuples)."""
    if isinstance(x, dict):
        for v in x.values():
            yield from _numbers(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _numbers(v)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield float(x)


@pytest.mark.parametrize("folder", sorted(FOLDERS))
@pytest.mark.parametrize("script", model_scripts())
def test_every_claim_command_ends_with_verdicts_or_one_line(script, folder, unusual, tmp_path, capfd):
    out = tmp_path / "out"
    code = run(script, ["--model-dir", str(unusual[folder]), "--out", str(out), "--no-png"])
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out, captured.err[-2000:]
    assert code in (0, 2), (code, captured.err[-1000:])
    if code == 2:
        errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, captured.err
        return
    summary = read_summary(out / "summary.json")
    assert summary.claims, f"{script} on {folder} wrote no claim"
    for c in summary.claims:
        assert c.verdict in ("held", "not held", "not testable"), c
        assert c.why.strip(), f"{c.key}: a verdict without its reason"
        if c.verdict != "not testable":
            values = list(_numbers(c.measured))
            assert values and all(math.isfinite(v) for v in values), (
                f"{script} on {folder}: {c.key} is {c.verdict} on {c.measured!r}"
            )


def test_the_edit_on_a_character_vocabulary_uses_single_characters_that_follow_each_other(unusual, tmp_path, capfd):
    out = tmp_path / "out"
    assert run("l4h11_edit", ["--model-dir", str(unusual["char-ctx32"]), "--out", str(out), "--no-png"]) == 0
    err = capfd.readouterr().err
    assert "single characters" in err and "no separator" in err and "a shorter template" in err
    numbers = read_summary(out / "summary.json").data
    assert numbers["target"] == "ntp" and len(numbers["prompt"]) <= 32


def test_where_no_repeat_prompt_fits_the_edit_is_not_testable_with_the_numbers(small_tokenizer, tmp_path):
    from gpt2_posheads import load_model, make_random_model_dir
    from gpt2_posheads.posts.gpt2_prev_heads import l4h11_edit

    model = load_model(
        make_random_model_dir(
            tmp_path / "m", n_layers=2, n_heads=2, d_model=16, n_ctx=4, tokenizer=small_tokenizer, seed=0
        )
    )
    prompts = torch.randint(1, 100, (2, 4))
    (claim,) = l4h11_edit(model, prompts, heads=["L1H0"]).claims
    assert claim.verdict == "not testable" and "context 4, needs" in claim.why, claim.why

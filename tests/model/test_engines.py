"""Every analysis on every engine that applies gives the same numbers: TransformerLens hooks, the hook-free fast
path, an nnsight trace and stored activations (``gpt2_posheads.model.engine``), on random-weight models of five
architectures and on the compiled route-gpt2 (weights set by hand: sharp heads, a 1e4 constant feature in the
residual stream).

Tolerance (:func:`tol`): the engines compute the same maths in float32 in different orders (TransformerLens folds
LayerNorm into the weights and centres the stream, the fast path fuses the QKV matmul, nnsight recomputes the pattern
from the Hugging Face model's own unfolded projections), so they agree to float32 rounding, not to the bit. Gaps are
relative to the largest magnitude of the quantity compared (absolute for patterns, masses, probabilities, scores in
[0, 1]). On the random-weight models the largest gap measured over every analysis and engine is 1.0e-7: 1e-6 there.
The compiled route-gpt2 amplifies rounding by construction (a 1e4 constant feature in every embedding, where one
float32 step is 1e-3, and sharp heads whose logits turn that into pattern and probability gaps): its largest measured
gaps are 1e-5 on diagonal masses, 2.7e-5 on ratios (a quotient of two masses), 2.2e-5 on KL and 5.8e-5 on next-token
probabilities: 3e-4 there. A wrong engine (a mask off by one position, an edit not applied, the BOS key counted, the
stream not centred) moves these numbers by 1e-3 or more, and each intervention is checked to move the diagonals by
ten times the tolerance (but W_pos averaging on route-gpt2, which is built to ignore it). Where two engines run the
very same pass (``"auto"`` with interventions takes the hooks; a store answers with what the engine that built it
computed), the numbers must be equal to the bit.
"""

import importlib.util

import pytest
import torch

from gpt2_posheads import (
    average_ext_pos_embed,
    average_pos_embed,
    diagonal_attention,
    edit_head_pattern,
    extended_pos_embeddings,
    extended_pos_embeddings_by_layer,
    head_table,
    load_model,
    mask_previous_attention,
    ood_composition_scores,
    prev_token_ranking,
    scale_head_output,
)
from gpt2_posheads.analysis.measures import compare_head_patterns, kl_divergence, next_token_probs
from gpt2_posheads.model.engine import EngineError, engine_for

from conftest import ARCHITECTURES

TOL = {"route-gpt2": 3e-4}  # the module doc says why
HAS_NNSIGHT = importlib.util.find_spec("nnsight") is not None
CASES = (*ARCHITECTURES, "route-gpt2")
GPT2_FAMILY = {"gpt2", "route-gpt2"}  # what the fast path reproduces (it verifies itself and steps aside elsewhere)
LEARNED_POS = {"gpt2", "gpt-neo", "opt", "route-gpt2"}


@pytest.fixture(scope="session")
def route_dir(tmp_path_factory):
    from gpt2_posheads.organism.compiled import build

    return build("route-gpt2", tmp_path_factory.mktemp("engines") / "route-gpt2", measured=False)


@pytest.fixture(scope="session")
def models(arch_dirs, route_dir):
    """``get(case, engine)``: the model an engine runs (loaded once): the TransformerLens model for hooks, fast and
    auto, the nnsight-traced one for nnsight."""
    dirs, loaded = {**arch_dirs, "route-gpt2": route_dir}, {}

    def get(case: str, engine: str):
        kind = "nnsight" if engine == "nnsight" else "tl"
        if (case, kind) not in loaded:
            if kind == "nnsight":
                from gpt2_posheads.model.engine_nnsight import load_traced

                loaded[case, kind] = load_traced(dirs[case])
            else:
                loaded[case, kind] = load_model(dirs[case], device="cpu")
        return loaded[case, kind]

    return get


def _tokens(model, n=2, pos=24, seed=0):
    return torch.randint(1, model.cfg.d_vocab, (n, pos), generator=torch.Generator().manual_seed(seed))


def _numbers(x) -> dict[str, torch.Tensor]:
    """Every number of an analysis's result as float64 tensors by name (a DataFrame's numeric columns by head)."""
    if isinstance(x, torch.Tensor):
        return {"": x.double()}
    if isinstance(x, float):
        return {"": torch.tensor(x, dtype=torch.float64)}
    if isinstance(x, dict):
        return {f"{k}.{n}": t for k, v in x.items() for n, t in _numbers(v).items()}
    # a ranking or an atlas: per head, whatever the order (heads built alike tie to float rounding, in any order)
    df = x.set_index("name").sort_index().drop(columns=["rank"], errors="ignore")
    return {c: torch.tensor(df[c].to_numpy(dtype=float)) for c in df.select_dtypes(["number", "bool"]).columns}


def tol(case: str) -> float:
    return TOL.get(case, 1e-6)


def assert_same(ref, got, what: str, tol: float) -> None:
    ref, got = _numbers(ref), _numbers(got)
    assert set(ref) == set(got), what
    for k, a in ref.items():
        b = got[k]
        assert a.shape == b.shape, f"{what} {k}"
        assert bool((a.isnan() == b.isnan()).all()), f"{what} {k}: NaN in different places"
        gap = float((a - b).nan_to_num().abs().max()) if a.numel() else 0.0
        scale = max(1.0, float(a.nan_to_num().abs().max())) if a.numel() else 1.0
        assert gap <= tol * scale, f"{what} {k}: engines differ by {gap:.2e} (scale {scale:.3g})"


# --- the analyses, each as (model, engine) -> result ----------------------------------------------------------------
def _ext_layers(m):
    return [0, 2, m.cfg.n_layers]


CLEAN = {  # patterns and residuals of the model itself: every engine
    "diagonal_attention": lambda m, e: diagonal_attention(m, _tokens(m), progress=False, engine=e),
    "rank_prev_heads": lambda m, e: prev_token_ranking(m, _tokens(m), progress=False, engine=e),
    "extended_pos_embeddings": lambda m, e: extended_pos_embeddings_by_layer(
        m, _ext_layers(m), n_prompts=2, seq_len=24, engine=e
    ),
    "head_table": lambda m, e: head_table(m, _tokens(m), n_seqs=2, seg_len=8, engine=e),  # via traced_stats
    "ood_composition_scores": lambda m, e: ood_composition_scores(m, n_seqs=4, seg_len=8, engine=e),
}


def _interventions(case: str):
    ivs = {
        "mask_previous_attention": mask_previous_attention(5, [0, 1]),
        "average_ext_pos_embed": average_ext_pos_embed(1, 4, n_prompts=2, seq_len=24),
        "edit_head_pattern": edit_head_pattern(1, 0, {5: 3, 9: {2: 1.0, 8: 1.0}}),
        "scale_head_output": scale_head_output(1, 0, 0.25),  # the later layers' patterns move with it
    }
    if case in LEARNED_POS:
        ivs["average_pos_embed"] = average_pos_embed(10)
    return ivs


EDITED = {  # passes under an intervention's edits (bound once per model): the engines that apply edits
    "diagonal_attention": lambda m, e, edits: diagonal_attention(m, _tokens(m), progress=False, edits=edits, engine=e),
    "next_token_probs": lambda m, e, edits: next_token_probs(m, _tokens(m), edits, engine=e),
    "kl_divergence": lambda m, e, edits: kl_divergence(m, _tokens(m), edits, engine=e),
    "compare_head_patterns": lambda m, e, edits: compare_head_patterns(
        m, _tokens(m, 1), (2, 1), edits, rows=torch.arange(5, 24, 5), engine=e
    ),
}


def _engines(case: str, edits: bool) -> list[str]:
    out = ["hooks"] + (["auto"] if edits else ["fast"] if case in GPT2_FAMILY else [])
    return out + (["nnsight"] if HAS_NNSIGHT else [])


@pytest.mark.filterwarnings("ignore:fast path disabled")
@pytest.mark.parametrize("case", CASES)
def test_every_clean_analysis_is_the_same_on_every_engine(case, models):
    others = _engines(case, edits=False)[1:]
    if not others:  # nothing to compare the hooks with: say so rather than pass on an empty loop
        pytest.skip(f"{case}: the fast path runs the GPT-2 family only, and nnsight is not installed here")
    for name, analysis in CLEAN.items():
        ref = analysis(models(case, "hooks"), "hooks")
        for engine in others:
            assert_same(ref, analysis(models(case, engine), engine), f"{case} {name} on {engine}", tol(case))


# each kind of edit (a pattern edit, a residual addition, a position-embedding replacement, a head output) under the
# pattern reduction, and each other analysis under one of them
EDITED_UNDER = {"next_token_probs": "mask_previous_attention", "kl_divergence": "average_ext_pos_embed"}
EDITED_UNDER["compare_head_patterns"] = "mask_previous_attention"
# route-gpt2 counts positions from BOS: built so that W_pos averaging leaves its attention as it is
INERT = {("route-gpt2", "average_pos_embed")}


@pytest.mark.parametrize("case", [c for c in CASES if c != "opt"])  # OPT edits as GPT-Neo does (test_traced.py)
def test_every_analysis_under_interventions_is_the_same_on_every_engine(case, models):
    tl = models(case, "hooks")
    clean = diagonal_attention(tl, _tokens(tl), progress=False, engine="hooks")
    for iv_name, iv in _interventions(case).items():
        edits = [iv]
        traced = (models(case, "nnsight"), [iv]) if HAS_NNSIGHT else None
        for name, analysis in EDITED.items():
            if name != "diagonal_attention" and EDITED_UNDER[name] != iv_name:
                continue
            ref = analysis(tl, "hooks", edits)
            if name == "diagonal_attention" and (case, iv_name) not in INERT:  # it moves what is compared
                assert float((ref - clean).nan_to_num().abs().max()) > 10 * tol(case), iv_name
            if case in GPT2_FAMILY:  # "auto" has a fast path here, which applies no edit: it steps aside for them
                assert type(engine_for(tl, "auto")).__name__ == "FastEngine", case
                assert type(engine_for(tl, "auto", with_edits=True)).__name__ == "HooksEngine", case
            if traced is not None:
                got = analysis(traced[0], "nnsight", traced[1])
                assert_same(ref, got, f"{case} {name} {iv_name} on nnsight", tol(case))


@pytest.fixture(scope="session")
def store(models):
    """The toolkit's activation cache (``build_cache``) of the random GPT-2, and the prompts it fixed."""
    from gpt2_posheads.store.cache import build_cache

    tl = models("gpt2", "hooks")
    prompts = _tokens(tl, 2, 40, seed=3)
    return build_cache(tl, prompts, [], "gpt2", ext_n_prompts=2, seed=4, progress=False), prompts


def test_stored_activations_answer_as_the_model_does(models, store):
    """The store against the engine that built it ("auto": the fast path here), which the tests above hold to every
    other engine: its diagonals and ranking bit for bit, its extended embeddings re-centred to a shorter prompt."""
    case = "gpt2"
    store, prompts = store
    m, what = models(case, "auto"), f"{case} stored vs auto"
    assert_same(diagonal_attention(m, prompts, progress=False), diagonal_attention(store, None), what, 0.0)
    assert_same(prev_token_ranking(m, prompts, progress=False), prev_token_ranking(store), what, 0.0)
    for layer in _ext_layers(m):  # stored at n_ctx positions, re-centred over the first 24: causal attention
        ref = extended_pos_embeddings(m, layer, n_prompts=2, seed=4, seq_len=24)
        assert_same(ref, extended_pos_embeddings(store, layer, seq_len=24), f"{what} layer {layer}", tol(case))


def test_what_an_engine_cannot_do_is_one_clear_error(models, store):
    store, _ = store
    tl = models("gpt2", "hooks")
    iv = mask_previous_attention(5, [0])
    for call, words in [
        (lambda: ood_composition_scores(store), "stored engine cannot reduce attention patterns"),
        (lambda: head_table(store, _tokens(tl)), "stored activations fix the prompts"),
        (lambda: diagonal_attention(store, None, edits=[iv]), "stored engine cannot apply an intervention"),
        (lambda: engine_for(store).run(_tokens(tl)), "stored engine cannot run a model"),
        (lambda: prev_token_ranking(tl), "prompts is None"),
    ]:
        with pytest.raises(ValueError, match=words):
            call()
    with pytest.raises(ValueError, match="stored activations fix engine"):
        prev_token_ranking(store, engine="hooks")
    with pytest.raises(ValueError, match="engine='nnsight' needs a traced model"):
        diagonal_attention(tl, _tokens(tl), engine="nnsight")
    with pytest.raises(EngineError, match="fast engine cannot apply an intervention"):
        diagonal_attention(tl, _tokens(tl), edits=[iv], engine="fast")
    with pytest.raises(TypeError, match="edits: interventions"):  # its TransformerLens hooks are not an edit
        diagonal_attention(tl, _tokens(tl), edits=iv.hooks(tl))
    if HAS_NNSIGHT:
        nm = models("gpt2", "nnsight")
        with pytest.raises(EngineError, match="nnsight engine cannot keep every prompt's embedding"):
            extended_pos_embeddings(nm, 1, n_prompts=2, seq_len=24, return_per_token=True)
        with pytest.raises(ValueError, match="engine='hooks' runs a TransformerLens model"):
            diagonal_attention(nm, _tokens(tl), engine="hooks")

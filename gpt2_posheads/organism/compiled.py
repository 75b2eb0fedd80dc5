"""Small GPT-2s whose weights are set by hand to carry a known mechanism: ground truth for the verdicts.

Each model is an ordinary Hugging Face GPT-2 folder (4 layers, 4 heads, ``d_model`` 512, ``n_ctx`` 256, the shipped
4,096-token tokenizer) built deterministically in seconds, its weights written feature by feature in the named blocks
of the residual stream (:mod:`~gpt2_posheads.organism.weights`). Each head is built by a small function whose ``role``
(the card's words) says what it scores, reads and writes; each model by a row of :data:`BUILDERS`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from string import Template

import numpy as np

from ..model.paths import ORGANISM_DIR
from . import weights as wt
from .weights import SMALL, Compiled, Head, Parts, onto, parts, slot, waves

# Head dimensions: 0 carries a position term, 1 a BOS term, 2.. a code (token, bucket or waves).
POS_DIM, BOS_DIM, CODE = 0, 1, 2
EARLY_SLOPES = (0.65, 0.8, 0.95, 1.1)  # logits per position of the layer-1 heads' rise towards recent keys
INERT_SLOPES = (0.72, 0.87, 1.02)  # the layer-2 heads that attend like early heads but write nothing
SELF_PENALTY = 6.0  # logits a self-suppressing head takes off a key whose token (bucket) is the query's own
BOOST_MARGINS = (0.7, 0.8, 0.95, 1.1)  # a boosting head's bump at p-1 exceeds its rise by this much
AVOID_BOS = 30.0  # logits the early heads take off BOS (so a repeated token gives the same write everywhere)
AGG_GAIN, AGG_RECENCY = 6.0, 2.0  # the aggregator: weight of the early heads' estimate, and of recency
READER_GAIN, READER_RECENCY = 12.0, 3.0  # a W_pos reader: height of its kernel at p-1, and its rise per position
IND_GAIN, IND_RECENCY, IND_SINK = 30.0, 0.3, 8.0  # induction: the match, the most recent match first, BOS otherwise


def counter(p: Parts) -> Head:
    h = Head(
        p.res,
        role="counter: attends uniformly (zero query and key); reads the BOS flag and writes count = "
        f"{SMALL:g} / (p + 1), position from the causal mask alone",
    )
    return h.value("bos", slot(1, 0)).output(slot(1, 0, SMALL).T, "count")


def counted_position(p: Parts, freqs: np.ndarray | None = None, head: int = 0) -> None:
    """Layer 0 of every model that counts: the counter in head ``head``, the MLP writing ``pos`` (and ``waves``)."""
    p.heads[0][head] = counter(p)
    n_ctx = p.res.shape.n_ctx
    outputs = {"pos": SMALL * np.arange(n_ctx)[:, None] / n_ctx}
    role = f"turns count into pos = {SMALL:g} p / {n_ctx}"
    if freqs is not None:
        outputs["waves"] = SMALL * waves(n_ctx, freqs)
        role += f" and waves = {SMALL:g} (cos, sin)(w p) for w = pi (j + 1/2) / {len(freqs)}"
    p.mlps[0] = wt.positions_mlp(p, outputs, role + ", exact at every position")


def rising(h: Head, slope: float, block: str = "pos") -> Head:
    """``slope`` logits per position towards recent keys, read off ``pos`` (or off W_pos's ramp, ``block="fine"``)."""
    return h.query_bias(POS_DIM, slope * h.res.shape.n_ctx / SMALL).key(block, slot(h.res.size(block), POS_DIM))


def avoiding_bos(h: Head) -> Head:
    return h.query_bias(BOS_DIM, -AVOID_BOS).key("bos", slot(1, BOS_DIM))


def copies_into(h: Head, block: str) -> Head:
    """Copy the attended token's code (its first ``size(block)`` dimensions) into ``block``."""
    n = h.res.size(block)
    return h.value("tok", onto(h.res.size("tok"), CODE)[:, : CODE + n]).output(onto(n, CODE).T, block)


def self_suppressing(p: Parts, slope: float, writes: bool = True, penalty: float = SELF_PENALTY) -> Head:
    """A dip at the query's own token, and at the 1/n_buckets of tokens sharing its bucket; BOS avoided."""
    h = Head(
        p.res,
        role=f"self-suppressing previous-token head: score {slope:g} x (key position) - {penalty:g} where the "
        "key's token is the query's own (read off pos and bucket); "
        + ("writes the attended token's code to est" if writes else "writes nothing"),
    )
    return own_token(h, slope, -penalty, "est" if writes else None)


def boosting(p: Parts, slope: float, margin: float, writes: bool = True) -> Head:
    """A bump at p-1 (``K``: :func:`position_kernel`) that beats the current key by ``margin``; BOS avoided."""
    bump = slope + margin
    h = Head(
        p.res,
        role=f"boosting previous-token head: score {slope:g} x (key position) + {bump:g} at p-1 (the waves of the "
        "counted position, rotated by one step); "
        + ("writes the attended token's code to est" if writes else "writes nothing"),
    )
    rising(h, slope)
    avoiding_bos(h)
    position_kernel(h, "waves", bump)
    return copies_into(h, "est") if writes else h


def aggregator(p: Parts, gain: float = AGG_GAIN, recency: float = AGG_RECENCY) -> Head:
    """Attends to the nearest key whose token the early heads point at."""
    h = Head(
        p.res,
        role=f"aggregator: score {gain:g} x <est, key's token code> + {recency:g} x (key position); writes "
        "the attended token's code to prev",
    )
    rising(h, recency)
    k = p.res.size("tok")
    h.query("est", onto(k, CODE, gain)).key("tok", onto(k, CODE))
    return copies_into(h, "prev")


def position_kernel(h: Head, block: str, gain: float, shift: int = 1, first: int = CODE) -> Head:
    """Add ``gain * K(p - shift - k)`` to the score, read off the ``2F`` waves of ``block`` (``waves``: ``F =
    N_WAVES_MLP``; ``fine`` or ``relay``: a ramp, then ``F = N_WAVES_WPOS``), the query's turned back ``shift``
    positions (``waves(p) -> waves(p - shift)``), at head dims ``first..``. ``K(m) = sum_j cos(w_j m) / F`` is 1 at 0
    and 0 at ``0 < |m| < 2F`` (it returns at every ``4F`` positions: a rise per position must break the tie); the
    query is scaled by ``1 / (SMALL^2 F)`` since ``<waves(p - shift), waves(k)> = SMALL^2 F K(p - shift - k)``."""
    n = h.res.size(block)
    ramp = int(block in ("fine", "relay"))  # a leading ramp feature, no part of the kernel
    freqs = wt.kernel_freqs((n - ramp) // 2)
    q = np.zeros((n, first + n - ramp))
    q[ramp:, first:] = gain / (SMALL**2 * len(freqs)) * wt.shift_rotation(freqs, shift)
    k = np.zeros((n, first + n - ramp))
    k[ramp:] = onto(n - ramp, first)
    return h.query(block, q).key(block, k)


def wpos_reader(
    p: Parts, block: str = "fine", gain: float = READER_GAIN, recency: float = READER_RECENCY, writes: str = "prev"
) -> Head:
    """The previous position read straight off W_pos's fine components, or off their copy in ``block="relay"``."""
    where = "W_pos's" if block == "fine" else f"the {block} block's copy of W_pos's"
    h = Head(
        p.res,
        role=f"{'W_pos' if block == 'fine' else 'relay'} reader: score {gain:g} at p-1 ({where} waves rotated back "
        f"one position) + {recency:g} x (key position, {where} ramp); writes the attended token's code to {writes}",
    )
    rising(h, recency, block=block)
    position_kernel(h, block, gain)
    return copies_into(h, writes)


def relay(p: Parts, gain: float = READER_GAIN, recency: float = READER_RECENCY, share: float = 1.0) -> Head:
    """Attends to its own position and relays W_pos's fine components: nothing is computed."""
    h = Head(
        p.res,
        role=f"relay: score {gain:g} at its own position (W_pos's waves) + {recency:g} x (key position, W_pos's "
        f"ramp); copies {share:g} x W_pos's fine components into relay",
    )
    rising(h, recency, block="fine")
    position_kernel(h, "fine", gain, shift=0)
    n = p.res.size("fine")
    return h.value("fine", onto(n, CODE)).output(onto(n, CODE, share).T, "relay")


def induction(p: Parts, position: str = "pos") -> Head:
    """Attends to the token after the most recent earlier occurrence of the current token, to BOS when none."""
    h = Head(
        p.res,
        role=f"induction head: score {IND_GAIN:g} x <query's token code, prev> + {IND_RECENCY:g} x (key position), "
        f"{IND_SINK:g} above the current position on BOS; writes the attended token's code to out (the unembedding "
        "reads it)",
    )
    rising(h, IND_RECENCY, block=position)
    n = p.res.size(position)
    h.query(position, slot(n, BOS_DIM, IND_RECENCY * p.res.shape.n_ctx / SMALL)).query_bias(BOS_DIM, IND_SINK)
    h.key("bos", slot(1, BOS_DIM))
    k = p.res.size("tok")
    h.query("tok", onto(k, CODE, IND_GAIN)).key("prev", onto(k, CODE))
    return copies_into(h, "out")


def self_attending(p: Parts, slope: float | None, penalty: float = SELF_PENALTY, writes: str | None = None) -> Head:
    """Attends to its own token (``slope=None``: no rise, every earlier key of its bucket alike)."""
    rise = f"{slope:g} x (key position) + " if slope is not None else ""
    h = Head(
        p.res,
        role=f"attends to its own token (score {rise}{penalty:g} on its own token); "
        + (f"writes the attended token's code into {writes} (nothing reads it)" if writes else "writes nothing"),
    )
    return own_token(h, slope, penalty, writes)


def own_token(h: Head, slope: float | None, score: float, writes: str | None) -> Head:
    """``h`` rising ``slope`` (``None``: no rise), BOS avoided, ``score`` on its own bucket, copying into ``writes``."""
    if slope is not None:
        rising(h, slope)
    avoiding_bos(h)
    n = h.res.size("bucket")
    h.query("bucket", onto(n, CODE, score)).key("bucket", onto(n, CODE))
    return copies_into(h, writes) if writes else h


def uniform_writer(p: Parts, writes: str = "junk") -> Head:
    h = Head(
        p.res, role=f"attends uniformly; writes the mean code of the tokens so far into {writes} (nothing reads it)"
    )
    return copies_into(h, writes)


# --- the five models --------------------------------------------------------------------------------------------

_FINE = ("fine", 1 + 2 * wt.N_WAVES_WPOS)
_ROUTE = [("bucket", wt.N_BUCKETS), ("count", 1), ("pos", 1)] + [(b, wt.K_TOK) for b in ("est", "prev", "out")]


def _counted(boost: bool = False, sharp: Callable[[Parts], Head] = aggregator) -> Callable[[Parts], None]:
    """Layer 0 counts; four layer-1 early heads (self-suppressing, or boosting p-1) write their estimate; layer 2 holds
    the ``sharp`` head beside three early-like heads that write nothing; a layer-3 induction head reads ``prev``."""

    def fill(p: Parts) -> None:
        counted_position(p, wt.kernel_freqs(wt.N_WAVES_MLP) if boost else None)

        def early(s: float, m: float, writes: bool) -> Head:
            return boosting(p, s, m, writes) if boost else self_suppressing(p, s, writes)

        p.heads[1] = [early(s, m, True) for s, m in zip(EARLY_SLOPES, BOOST_MARGINS)]
        p.heads[2] = [sharp(p)] + [early(s, m, False) for s, m in zip(INERT_SLOPES, BOOST_MARGINS[1:])]
        p.heads[3][0] = induction(p)

    return fill


def _wpos(p: Parts) -> None:
    p.heads[2][0] = wpos_reader(p)
    p.heads[3][0] = induction(p, position="fine")


def _none(p: Parts) -> None:
    counted_position(p)
    for layer in (1, 2, 3):
        p.heads[layer] = [self_attending(p, s) for s in EARLY_SLOPES]


# name (model.paths.COMPILED_MODELS) -> (title, what it is: the card's summary, its blocks, what fills its layers)
BUILDERS: dict[str, tuple[str, str, list[tuple[str, int]], Callable[[Parts], None]]] = {
    "route-gpt2": (
        "the GPT-2 post's route, compiled",
        "Layer 0 counts positions from BOS with a uniform head and an MLP; four layer-1 heads rise towards recent keys "
        "and dip at their own token (self-suppressing, ratios 0.3-0.5); a layer-2 aggregator matches their estimate "
        "of the previous token against each key's token and attends precisely to it; a layer-3 induction head reads "
        "the aggregator. W_pos is GPT-2's own helix and nothing reads it.",
        _ROUTE,
        _counted(),
    ),
    "lookalike-wpos": (
        "a look-alike: the sharp head reads W_pos",
        "The same behaviour (a sharp previous-token head in layer 2, induction, copying) by another route: the sharp "
        "head reads the previous position straight off fine components of W_pos (a ramp and four waves added to "
        "GPT-2's helix); layers 0-1 write nothing.",
        [_FINE, ("prev", wt.K_TOK), ("out", wt.K_TOK)],
        _wpos,
    ),
    "lookalike-boost": (
        "a look-alike: early heads that boost the previous position",
        "route-gpt2 with layer-1 heads that boost p-1 (a bump in their score, from waves of the counted position) "
        "instead of suppressing their own token; the aggregator and induction head are route-gpt2's.",
        _ROUTE[1:3] + [("waves", 2 * wt.N_WAVES_MLP)] + _ROUTE[3:],
        _counted(boost=True),
    ),
    "lookalike-decoy": (
        "a look-alike: self-suppressing early heads that the sharp head ignores",
        "route-gpt2's layers 0-1 (the counter, and self-suppressing early heads that write their estimate), but the "
        "sharp layer-2 head ignores them and reads fine components of W_pos, as in lookalike-wpos.",
        _ROUTE[:4] + [_FINE] + _ROUTE[4:],
        _counted(sharp=wpos_reader),
    ),
    "lookalike-none": (
        "a look-alike: no previous-token mechanism",
        "Positions are counted as in route-gpt2, every later head attends to its own token, nothing copies and the "
        "unembedding is zero.",
        _ROUTE[:3],
        _none,
    ),
}


# --- folders, cards, measurements -----------------------------------------------------------------------------------


def compile_model(name: str) -> Compiled:
    """The compiled model ``name`` (one of :data:`BUILDERS`), for the shipped tokenizer's vocabulary."""
    if name not in BUILDERS:
        raise ValueError(f"unknown compiled model {name!r}; allowed {', '.join(BUILDERS)}")
    *_, blocks, fill = BUILDERS[name]
    p = parts(tokenizer_vocab(), blocks)
    fill(p)
    return p.model(name)


@functools.lru_cache(maxsize=1)
def tokenizer_vocab() -> int:
    """The shipped tokenizer's number of tokens (:data:`ORGANISM_DIR`): every compiled model's default vocabulary."""
    return len(json.loads((ORGANISM_DIR / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
REBUILT_FILES = ("config.json", "model.safetensors", *TOKENIZER_FILES)  # the same bytes on every rebuild
FOLDER_FILES = (*REBUILT_FILES, "README.md")


def write_folder(
    model: Compiled, out: Path, card: str, tokenizer_dir: Path = ORGANISM_DIR, config: dict | None = None
) -> Path:
    """A Hugging Face GPT-2 folder (:data:`FOLDER_FILES`): ``config.json`` (the model's, with ``config``'s keys
    added or replaced), ``model.safetensors`` (float32, keys sorted, fixed metadata), the tokenizer files of
    ``tokenizer_dir`` byte for byte, and the card ``README.md``."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {**model.config(model.W_E.shape[0]), **(config or {})}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_file(model.state_dict(), str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, out / name)
    (out / "README.md").write_text(card, encoding="utf-8")
    return out


def weights_digest(folder: Path) -> str:
    """SHA-256 of the files a rebuild reproduces byte for byte (:data:`REBUILT_FILES`: weights, config, tokenizer)."""
    h = hashlib.sha256()
    for name in REBUILT_FILES:
        h.update(name.encode())
        h.update((Path(folder) / name).read_bytes())
    return h.hexdigest()


def layout_lines(model: Compiled) -> list[str]:
    """The card's description of the architecture, the residual blocks and every head and MLP (Markdown lines)."""
    shape = model.res.shape
    n_vocab = model.W_E.shape[0]
    padded = f" (embedding and unembedding padded to {n_vocab:,} rows)" if n_vocab != tokenizer_vocab() else ""
    lines = [
        f"GPT-2 architecture: {shape.n_layers} layers x {shape.n_heads} heads, d_model {shape.d_model}, d_mlp "
        f"{shape.d_mlp}, n_ctx {shape.n_ctx}, the 4,096-token tokenizer of `data/mini-gpt2`{padded}, an untied "
        "unembedding. Every "
        f"LayerNorm has gain C / sqrt(d_model) with C = {wt.C:g} in every embedding: the identity on the features to "
        "1e-6.",
        "",
        "## The residual stream",
        "",
        "Each block of coordinates carries its features along a Helmert basis (orthonormal, coordinates summing to "
        "zero), so LayerNorm's centring never mixes blocks.",
        "",
        "| block | coordinates | features | holds |",
        "| --- | --- | --- | --- |",
    ]
    words = {  # what each block holds, in the card's words
        "const": f"the constant C = {wt.C:g} in every token embedding (LayerNorm's scale)",
        "bos": "1 on the BOS token",
        "helix": f"W_pos: GPT-2's first {shape.n_ctx} rows on their top 8 principal components",
        "tok": f"the token's random unit code ({shape.k_tok} dimensions)",
        "bucket": f"the token's one-hot bucket ({shape.n_buckets}; what a self-suppressing head matches)",
        "count": f"{SMALL:g} / (p + 1), written by the layer-0 counter",
        "pos": f"{SMALL:g} p / {shape.n_ctx}, written by the layer-0 MLP",
        "waves": f"{SMALL:g} (cos, sin)(w p) of the counted position, written by the layer-0 MLP",
        "fine": f"W_pos's fine components: {SMALL:g} p / {shape.n_ctx} and {SMALL:g} (cos, sin)(w p), "
        "w = pi (j + 1/2) / 4",
        "est": "the early heads' estimate of the previous token (a mix of codes)",
        "prev": "the sharp head's previous-token code",
        "out": "the induction head's copy (read by the unembedding)",
        "relay": "a copy of W_pos's fine components, written by layer-0 heads that attend to their own position",
        "junk": "what heads doing unrelated work write (nothing reads it)",
    }
    lines += [f"| `{name}` | {s}-{s + n} | {n} | {words[name]} |" for name, (s, n) in model.res.blocks.items()]
    lines += ["", "## Heads and MLPs", "", "| layer | head | what it does |", "| --- | --- | --- |"]
    lines += [f"| {l} | L{l}H{h} | {head.role} |" for l, hs in enumerate(model.heads) for h, head in enumerate(hs)]
    return lines + [f"| {l} | MLP | {m.role} |" for l, m in enumerate(model.mlps)]


CARD = """# $name: $title

$about

A GPT-2 whose weights are set by hand (`gpt2_posheads.organism.compiled`), built by \
`python experiments/build_compiled_models.py`: deterministic, the same bytes on every rebuild. A ground truth for the \
verdicts of the GPT-2 post's claims, not a language model (it predicts only copies).

$layout

## The verdict each claim must get

Written down from the construction before anything was measured (`gpt2_posheads.organism.known_answers`); \
`tests/organism/test_known_answers.py` runs every claim and asserts them.

| script | claim | verdict | why |
| --- | --- | --- | --- |
$verdicts$measured
"""


def card(model: Compiled, measured: dict | None = None) -> str:
    """The model's card (:data:`CARD`), with the numbers the toolkit ``measured``."""
    from .known_answers import expected

    title, about, *_ = BUILDERS[model.name]
    verdicts = [f"| `{script}` | `{key}` | {v} | {why} |" for (script, key), (v, why) in expected(model.name).items()]
    more = "".join(f"\n- {k}: {v}" for k, v in measured.items()) if measured else ""
    return Template(CARD).substitute(
        name=model.name,
        title=title,
        about=about,
        layout="\n".join(layout_lines(model)),
        verdicts="\n".join(verdicts),
        measured=f"\n\n## Measured by the toolkit\n{more}" if measured else "",
    )


def measure(folder: Path, n_prompts: int = 16) -> dict[str, str]:
    """The numbers a card reports, measured by the toolkit on the built folder (``n_prompts`` WikiText-2 prompts)."""
    from ..analysis.diagonals import choose_aggregator, diagonal_attention, early_prev_heads, rank_from_diagonals
    from ..analysis.induction import induction_scores
    from ..analysis.interventions import average_pos_embed, mask_previous_attention, masked_queries
    from ..analysis.measures import compare_head_patterns, next_token_probs
    from ..analysis.prompts import make_prompts, wikitext_documents
    from ..analysis.repeat_prompt import repeat_string_prompt, single_token_target
    from ..claims.verdicts import fmt
    from ..model.loading import load_model
    from ..model.validation import head_name

    model = load_model(folder, device="cpu")
    prompts = make_prompts(model.tokenizer, n_prompts, wt.N_CTX, docs=wikitext_documents())
    diag = diagonal_attention(model, prompts, progress=False)
    rank = rank_from_diagonals(diag)
    out: dict[str, str] = {"prompts": f"{n_prompts} WikiText-2 prompts of {wt.N_CTX} tokens"}
    prev = rank[rank.is_prev_token]
    out["previous-token heads"] = f"{len(prev)} of {len(rank)}"
    if len(prev):
        l, h = choose_aggregator(rank)
        out["sharpest previous-token head"] = f"{head_name(l, h)}, ratio {fmt(prev.iloc[0].ratio)}"
        early = early_prev_heads(rank, l)
        if len(early):
            out["clear previous-token heads below it"] = ", ".join(
                f"{r.name} {fmt(r.ratio)}" for r in early.itertuples()
            )
        avg = diagonal_attention(model, prompts, edits=[average_pos_embed(10)], progress=False)
        out["its previous-token mass under W_pos averaged in groups of 10"] = (
            f"{fmt(float(diag[l, h, 1]))} -> {fmt(float(avg[l, h, 1]))}"
        )
        if l > 0:
            rows = masked_queries(5, wt.N_CTX)
            cmp = compare_head_patterns(model, prompts[:4], (l, h), [mask_previous_attention(5, range(l))], rows=rows)
            out["... on the rows masked every 5th query below it"] = (
                f"{fmt(cmp['prev_rows_clean'])} -> {fmt(cmp['prev_rows_intervened'])}"
            )
    ind = induction_scores(model, n_seqs=16, seg_len=50)
    out["best induction head"] = f"{ind.best[0]}, score {fmt(ind.best[1])}"
    out["copy losses on BOS r r (first, second copy)"] = f"{fmt(ind.loss_first)}, {fmt(ind.loss_second)} nats"
    words = single_token_target(model.tokenizer, " ninja turtle pirate")
    rp = repeat_string_prompt(model.tokenizer, words, n_given=1, max_len=wt.N_CTX)
    p = float(next_token_probs(model, rp.tokens)[0][rp.next_token_id(model.tokenizer)])
    out[f"P({rp.next_word.strip()} | {rp.words[0].strip()}) on the repeat-string prompt"] = fmt(p)
    return out


def build(name: str, out: Path, measured: bool = True) -> Path:
    """Write the compiled model ``name`` to ``out`` with its card (``measured``: and the numbers measured on it)."""
    model = compile_model(name)
    write_folder(model, out, card(model))
    if measured:
        (Path(out) / "README.md").write_text(card(model, measure(out)), encoding="utf-8")
    return Path(out)


def check_folder(folder: Path) -> str | None:
    """What is wrong with a compiled model's folder, in a few words, or ``None``: a file a build writes is missing, or
    :func:`~gpt2_posheads.model.folder.folder_problem`'s answer. A folder that fails is rebuilt on first use."""
    from ..model.folder import folder_problem

    missing = [f for f in FOLDER_FILES if not (Path(folder) / f).is_file()]
    if missing:
        return f"no {', '.join(missing)}"
    return folder_problem(folder)

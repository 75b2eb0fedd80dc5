"""A generator of compiled known-answer GPT-2s: deterministic from a seed, each with a card saying its route.

Every model is built from the heads of :mod:`~gpt2_posheads.organism.compiled`, its sizes, head placement, strengths,
perturbation and extra heads drawn from ``numpy``'s PCG64 seeded with the model's seed (the kinds, layouts, strengths
and perturbations: ``docs/known-answers.md``, "The generator"; the ranges stand beside each draw below). ``mixed`` is
ambiguous by construction: its aggregator reads both the early heads' estimate and ``W_pos``. An asked-for shape
replaces the drawn one after the draw, so asking for the drawn shape gives the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..claims.route import BOOST, NONE, POST, RELAY, ROUTES, UNDETERMINED, WPOS
from ..model.loading import GPT2_SMALL_SHAPE
from ..model.validation import HEAD_NAME, head_name, parse_head
from . import compiled as cp
from . import weights as wt

# kind -> (the route conclusion it must get, ambiguous by construction, what it is)
KINDS: dict[str, tuple[str, bool, str]] = {
    "post": (POST, False, "the post's route: counter, self-suppressing early heads, an aggregator of their estimate"),
    "boost": (BOOST, False, "the post's route with early heads that boost the previous position"),
    "wpos": (WPOS, False, "a head above layer 0 reads the previous position straight off W_pos"),
    "wpos-layer0": (WPOS, False, "a layer-0 head reads the previous position straight off W_pos (toy post 000)"),
    "decoy": (WPOS, False, "a W_pos reader above early heads that write an estimate nothing reads"),
    "relay": (RELAY, False, "heads below copy W_pos to another block; the sharp head reads the copy"),
    "none": (NONE, False, "no sharp previous-token head: heads attend to their own token, messy ones write nothing"),
    "mixed": (UNDETERMINED, True, "the aggregator reads the early heads' estimate and W_pos: two routes at once"),
}
KIND_ORDER = tuple(KINDS)
D_MODELS = (256, 384, 512, 640, 768, 896, 1024)
MIN_D_HEAD = 64
TOKEN_BLOCKS = ("tok", "est", "prev", "out", "junk")  # the blocks whose features are token codes
JUNK = 8  # features of the block unrelated heads write into
MAX_NOISE = 0.03
P_UNRELATED = 0.4
ROUTE_LAYERS = 6  # the route's heads (the aggregator or reader and what it reads) sit in layers below this
MIN_LAYERS, MAX_LAYERS = 3, 48  # an asked-for depth: layer 0 counts, layer >= 1 estimates, layer >= 2 aggregates
MIN_CTX, MAX_CTX = 64, 1024  # an asked-for context: at most GPT-2's W_pos rows
GPT2_SMALL = dict(zip(("n_layers", "n_heads", "d_model", "n_ctx", "n_vocab"), GPT2_SMALL_SHAPE))


@dataclass
class Generated:
    """A generated model and its card (``route``: the conclusion it must get; ``aggregator``: the sharp head, None for
    ``none``; ``ambiguous``: whether ``undetermined`` is the right answer by construction)."""

    model: wt.Compiled
    card: dict
    name = property(lambda self: self.model.name)


def layouts(max_d_model: int | None = None) -> list[tuple[int, int]]:
    """Every ``(d_model, n_heads)`` drawn from: :data:`D_MODELS` up to ``max_d_model``, 2-8 heads, ``d_head >= 64``."""
    return [
        (d, h)
        for d in D_MODELS
        if max_d_model is None or d <= max_d_model
        for h in range(2, 9)
        if d % h == 0 and d // h >= MIN_D_HEAD
    ]


def _blocks(kind: str, early_kind: str, k: int, n_buckets: int) -> list[tuple[str, int]]:
    """The residual blocks of a kind (after ``const``, ``bos``, ``helix``, ``tok``)."""
    fine = ("fine", 1 + 2 * wt.N_WAVES_WPOS)
    counted = [("count", 1), ("pos", 1)] + ([("waves", 2 * wt.N_WAVES_MLP)] if early_kind == "boosting" else [])
    early = {"post": [("est", k)], "boost": [("est", k)], "mixed": [("est", k), fine], "decoy": [("est", k), fine]}
    if kind == "none":
        per_kind = counted
    elif kind in early:
        per_kind = counted + early[kind] + [("prev", k), ("out", k)]
    else:  # wpos, wpos-layer0, relay: W_pos's fine components (and the relay's copy of them)
        per_kind = (
            [fine] + ([("relay", 1 + 2 * wt.N_WAVES_WPOS)] if kind == "relay" else []) + [("prev", k), ("out", k)]
        )
    return [("bucket", n_buckets)] + per_kind + [("junk", JUNK)]


def _int(name: str, v, lo: int, hi: int) -> int:  # v as an int in lo..hi, or a ValueError naming the argument
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
        raise ValueError(f"{name}: {v!r} must be an integer in {lo}..{hi}")
    return int(v)


def generate(
    seed: int,
    kind: str,
    max_d_model: int | None = None,
    n_vocab: int | None = None,
    noise: float | None = None,
    *,
    layout: tuple[int, int] | None = None,
    n_layers: int | None = None,
    n_ctx: int | None = None,
    d_mlp: int | None = None,
    placement: dict | None = None,
    n_tokens: int | None = None,
    reserved: tuple[int, int] = (0, 0),
) -> Generated:
    """The generated model of ``kind`` (:data:`KINDS`) for ``seed`` (the same bytes for the same arguments). ``noise``:
    the perturbation's fraction instead of the drawn one. ``n_vocab``: embedding and unembedding rows (default: the
    shipped tokenizer's 4,096; more are padding with no token code, zero rows of ``W_U``, as GPT-2's 50,257). Asked-for
    sizes replace drawn ones (the draws are the same): ``layout`` ``(d_model, n_heads)`` (``d_head >= 64``, the kind's
    blocks must fit), ``n_layers`` (3-48), ``n_ctx`` (64-1024, default 256), ``d_mlp`` (``>= n_ctx``, default
    ``max(512, n_ctx)``). For a model in another's image (:mod:`~gpt2_posheads.organism.standin`): ``placement`` names
    the heads instead of drawing their slots (:data:`PLACED_ROLES`; kinds ``post``, ``boost``; drawn and replaced, so
    other models keep their bytes), ``n_tokens`` the ids a tokenizer produces (rows past it: padding) and ``reserved``
    ``(before, after)`` residual coordinates at either end that belong to no block."""
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not a kind; allowed {', '.join(KINDS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: {seed!r} must be an integer >= 0")
    pairs = layouts(max_d_model)
    if not pairs:
        raise ValueError(f"max_d_model: {max_d_model} allows no layout; allowed >= {min(D_MODELS)}")
    if layout is not None:
        if not isinstance(layout, (tuple, list)) or len(layout) != 2:
            raise ValueError(f"layout: {layout!r} must be a pair (d_model, n_heads)")
        layout = _int("layout", layout[0], min(D_MODELS), 4096), _int("layout", layout[1], 1, 64)
        if layout[0] % layout[1] or layout[0] // layout[1] < MIN_D_HEAD:
            raise ValueError(
                f"layout: {layout[1]} heads of d_model {layout[0]} must divide it into heads of >= {MIN_D_HEAD} "
                "dimensions"
            )
        if max_d_model is not None and layout[0] > max_d_model:
            raise ValueError(f"layout: d_model {layout[0]} is above max_d_model {max_d_model}")
    if n_layers is not None:
        n_layers = _int("n_layers", n_layers, MIN_LAYERS, MAX_LAYERS)
    n_ctx = wt.N_CTX if n_ctx is None else _int("n_ctx", n_ctx, MIN_CTX, MAX_CTX)
    d_mlp = max(wt.D_MLP, n_ctx) if d_mlp is None else _int("d_mlp", d_mlp, n_ctx, 65536)
    n_vocab = cp.tokenizer_vocab() if n_vocab is None else _int("n_vocab", n_vocab, cp.tokenizer_vocab(), 10**6)
    rng = np.random.Generator(np.random.PCG64(seed))
    drawn = pairs[int(rng.integers(len(pairs)))], int(rng.integers(3, 7))  # replaced by asked-for sizes
    (d_model, n_heads), n_layers = layout or drawn[0], n_layers or drawn[1]
    route_top = min(n_layers, ROUTE_LAYERS)  # the route's heads sit below this layer (all layers when <= 6)
    early_kind = {"post": "self_suppressing", "mixed": "self_suppressing", "boost": "boosting"}.get(kind)
    if kind == "decoy":
        early_kind = ("self_suppressing", "boosting")[int(rng.integers(2))]
    for k in range(min(96, d_model // n_heads - 10), 7, -1):  # the largest token codes (<= 96, <= d_head - 10)
        blocks = _blocks(kind, early_kind, k, min(64, k))  # whose blocks fit the residual less the reserved ones
        if sum(n + 1 for n in [1, 1, 8, k] + [n for _, n in blocks]) <= d_model - sum(reserved):
            break
    else:
        raise ValueError(f"layout: d_model {d_model} cannot hold the blocks of {kind!r}")
    shape = wt.Shape(n_layers, n_heads, d_model, k, min(64, k), d_mlp, n_ctx)
    p = wt.parts(n_vocab, blocks, shape, first=reserved[0])
    # padding (ids the tokenizer never produces) carries no code and no bucket: the constant alone in W_E, zero rows
    # of W_U (logit 0: 46k random codes would outbid the copied token, as GPT-2's unused rows never do)
    n_tokens = cp.tokenizer_vocab() if n_tokens is None else _int("n_tokens", n_tokens, 2, n_vocab)
    p.codes[n_tokens:] = 0.0
    p.buckets[n_tokens:] = 0.0
    asked_heads = _check_placement(placement, kind, n_layers, n_heads)
    free = {(l, h) for l in range(n_layers) for h in range(n_heads)}
    card: dict = {"seed": int(seed), "kind": kind, "route": KINDS[kind][0], "ambiguous": KINDS[kind][1]}

    def place(layer: int, head) -> str:
        h = int(rng.choice(sorted(h for l, h in free if l == layer))) if head is None else head
        free.discard((layer, h))
        return head_name(layer, h)

    def put(name: str, head: wt.Head) -> str:
        l, h = parse_head(name)
        free.discard((l, h))
        p.heads[l][h] = head
        return name

    def some_slots(top: int, lo: int, hi: int) -> list[tuple[int, int]]:  # lo..hi-1 free slots of layers 1..top-1
        slots = sorted(s for s in free if 1 <= s[0] < top)
        n = min(int(rng.integers(lo, hi)), len(slots))
        return [slots[i] for i in sorted(rng.choice(len(slots), n, replace=False))]

    def reader_strengths() -> tuple[float, float]:
        return float(rng.uniform(10, 14)), float(rng.uniform(2.5, 3.5))  # kernel peak, rise per position

    strengths: dict = {}
    counted = kind in ("post", "boost", "mixed", "decoy", "none")
    if counted:  # the layer-0 MLP turns the count into pos (and waves); the counter goes to a drawn slot
        card["counter"] = place(0, asked_heads["counter"][1] if asked_heads else None)
        freqs = wt.kernel_freqs(wt.N_WAVES_MLP) if early_kind == "boosting" else None
        cp.counted_position(p, freqs, head=parse_head(card["counter"])[1])

    if kind in ("post", "boost", "mixed", "decoy"):
        a = int(rng.integers(2, route_top))
        chosen = some_slots(a, 2, 7)
        if asked_heads:  # drawn above and replaced: the draws that follow are the same
            a, chosen = asked_heads["aggregator"][0], list(asked_heads["early_heads"])
        early = []
        for l, h in chosen:
            e = {"slope": float(rng.uniform(0.6, 1.2))}
            if early_kind == "boosting":
                e["margin"] = float(rng.uniform(0.7, 1.2))
                head = cp.boosting(p, e["slope"], e["margin"])
            else:
                e["penalty"] = float(rng.uniform(4.5, 7.5))
                head = cp.self_suppressing(p, e["slope"], penalty=e["penalty"])
            early.append({"head": put(head_name(l, h), head), **e})
        card.update(early_heads=[e["head"] for e in early], early_kind=early_kind)
        strengths["early"] = early
        card["aggregator"] = place(a, asked_heads["aggregator"][1] if asked_heads else None)
        if kind == "decoy":
            gain, rec = reader_strengths()
            put(card["aggregator"], cp.wpos_reader(p, gain=gain, recency=rec))
            card["decoy"] = True
        else:
            gain = float(rng.uniform(0.8, 1.25)) * cp.AGG_GAIN * 4 / len(chosen)
            rec = float(rng.uniform(1.5, 2.5))
            agg = cp.aggregator(p, gain=gain, recency=rec)
            if kind == "mixed":
                kernel = float(rng.uniform(10, 14))
                cp.position_kernel(agg, "fine", kernel, first=cp.CODE + shape.k_tok)
                agg.role += f"; also {kernel:g} at p-1 from W_pos's waves (the W_pos reader's kernel)"
                strengths["mixed_kernel"] = kernel
            put(card["aggregator"], agg)
        strengths["aggregator"] = {"gain": gain, "recency": rec}
    elif kind in ("wpos", "wpos-layer0", "relay"):
        a = 0 if kind == "wpos-layer0" else int(rng.integers(1, route_top))
        card["aggregator"] = place(a, None)
        gain, rec = reader_strengths()
        if kind == "relay":
            r = int(rng.integers(0, a))
            n_relay = min(int(rng.integers(1, 3)), n_heads)
            card["relay_heads"] = [place(r, None) for _ in range(n_relay)]
            strengths["relay"] = []
            for name in card["relay_heads"]:
                rg, rr = reader_strengths()
                put(name, cp.relay(p, gain=rg, recency=rr, share=1.0 / n_relay))
                strengths["relay"].append({"head": name, "gain": rg, "recency": rr})
        put(card["aggregator"], cp.wpos_reader(p, block="relay" if kind == "relay" else "fine", gain=gain, recency=rec))
        strengths["aggregator"] = {"gain": gain, "recency": rec}
    else:  # none: messy previous-token heads that write nothing, then heads that attend to their own token
        card["aggregator"] = None
        card["messy_heads"] = [
            put(head_name(l, h), cp.self_suppressing(p, float(rng.uniform(0.6, 1.2)), writes=False))
            for l, h in some_slots(route_top, 0, 5)
        ]
        for l, h in some_slots(route_top, 1, 5):
            put(head_name(l, h), cp.self_attending(p, float(rng.uniform(0.6, 1.2))))

    a_layer = parse_head(card["aggregator"])[0] if card.get("aggregator") else None
    if a_layer is not None and a_layer < n_layers - 1:
        ind_layer, ind_head = int(rng.integers(a_layer + 1, min(n_layers, route_top + 1))), None
        if asked_heads:
            ind_layer, ind_head = asked_heads["induction_head"]
        card["induction_head"] = place(ind_layer, ind_head)
        put(card["induction_head"], cp.induction(p, position="pos" if "pos" in p.res.blocks else "fine"))

    card["unrelated_heads"] = []
    for l, h in sorted(free):
        if rng.uniform() >= P_UNRELATED:
            continue
        if rng.integers(2) == 0:
            head = cp.uniform_writer(p)
        else:
            slope = float(rng.uniform(0.6, 1.2)) if ("pos" in p.res.blocks and l >= 1) else None
            head = cp.self_attending(p, slope, writes="junk")
        card["unrelated_heads"].append(put(head_name(l, h), head))

    drawn_noise = float(rng.uniform(0, MAX_NOISE))
    card["noise"] = drawn_noise if noise is None else float(noise)
    perturb(p, card["noise"], rng)
    card["strengths"] = strengths
    card["shape"] = {**asdict(shape), "d_head": shape.d_head, "n_vocab": int(n_vocab)}
    # the sizes that differ from the draws and defaults: what generate() must be asked for to rebuild this model
    asked = {
        "n_vocab": (n_vocab, cp.tokenizer_vocab()),
        "layout": ((d_model, n_heads), drawn[0]),
        "n_layers": (n_layers, drawn[1]),
        "n_ctx": (n_ctx, wt.N_CTX),
        "d_mlp": (d_mlp, max(wt.D_MLP, n_ctx)),
    }
    card["asked"] = {k: list(v) if isinstance(v, tuple) else int(v) for k, (v, d) in asked.items() if v != d}
    card["name"] = f"gen-{seed:05d}"
    return Generated(p.model(card["name"]), card)


PLACED_ROLES = ("counter", "early_heads", "aggregator", "induction_head")


def _check_placement(placement: dict | None, kind: str, n_layers: int, n_heads: int) -> dict | None:
    """``placement`` as ``{role: (layer, head)}`` (``early_heads``: a list of them), checked: the counter in layer 0,
    2-6 early heads in layers between it and the aggregator, the induction head above the aggregator, no slot twice.
    A ValueError names ``placement``."""
    if placement is None:
        return None
    if kind not in ("post", "boost"):
        raise ValueError(f"placement: heads can be placed for the kinds post and boost, not {kind!r}")
    if not isinstance(placement, dict) or set(placement) != set(PLACED_ROLES):
        raise ValueError(f"placement: {placement!r} must name exactly {', '.join(PLACED_ROLES)}")

    def slot_of(name) -> tuple[int, int]:
        m = HEAD_NAME.fullmatch(str(name))
        if not m or int(m.group(1)) >= n_layers or int(m.group(2)) >= n_heads:
            raise ValueError(f"placement: {name!r} is not a head of {n_layers} layers x {n_heads} heads")
        return int(m.group(1)), int(m.group(2))

    out = {role: slot_of(placement[role]) for role in ("counter", "aggregator", "induction_head")}
    out["early_heads"] = [slot_of(n) for n in placement["early_heads"]]
    a = out["aggregator"][0]
    slots = [out["counter"], out["aggregator"], out["induction_head"], *out["early_heads"]]
    if len(set(slots)) != len(slots):
        raise ValueError(f"placement: a head slot is named twice in {placement!r}")
    if out["counter"][0] != 0 or not 2 <= a < min(n_layers, ROUTE_LAYERS) or out["induction_head"][0] <= a:
        raise ValueError(
            f"placement: the counter must sit in layer 0, the aggregator in layers 2..{min(n_layers, ROUTE_LAYERS) - 1}"
            " and the induction head above the aggregator"
        )
    if not 2 <= len(out["early_heads"]) <= 6 or any(not 1 <= l < a for l, _ in out["early_heads"]):
        raise ValueError(f"placement: 2-6 early heads in layers 1..{a - 1} (below the aggregator)")
    out["early_heads"] = sorted(out["early_heads"])
    return out


def gpt2_small_route(
    seed: int = 0,
    n_vocab: int = GPT2_SMALL["n_vocab"],
    n_layers: int = GPT2_SMALL["n_layers"],
    n_heads: int = GPT2_SMALL["n_heads"],
    d_model: int = GPT2_SMALL["d_model"],
    n_ctx: int = GPT2_SMALL["n_ctx"],
    noise: float | None = None,
    **image,
) -> Generated:
    """The post's route (kind ``post``) in GPT-2 small's shape: 12 layers x 12 heads, d_model 768, d_mlp 3,072
    (``4 d_model``), n_ctx 1024, 50,257 embedding and unembedding rows (the shipped 4,096-token tokenizer, the rest
    padding): what a user with the hub runs on ``gpt2``. Any size can be made smaller for a quick check. ``image``:
    :func:`generate`'s ``placement``, ``n_tokens`` and ``reserved`` (:mod:`~gpt2_posheads.organism.standin`)."""
    d_model = _int("d_model", d_model, min(D_MODELS), 4096)
    n_heads = _int("n_heads", n_heads, 1, 64)
    if d_model % n_heads or d_model // n_heads < MIN_D_HEAD:
        raise ValueError(f"n_heads: {n_heads} heads must divide d_model {d_model} into heads of >= {MIN_D_HEAD}")
    sizes = dict(layout=(d_model, n_heads), n_layers=n_layers, n_ctx=n_ctx, d_mlp=4 * d_model)
    return generate(seed, "post", n_vocab=n_vocab, noise=noise, **sizes, **image)


def token_rows(res: wt.Residual) -> np.ndarray:
    """The residual coordinates of the blocks that carry token codes (:data:`TOKEN_BLOCKS`)."""
    rows = [np.arange(s, s + n + 1) for name, (s, n) in res.blocks.items() if name in TOKEN_BLOCKS]
    return np.concatenate(rows) if rows else np.zeros(0, dtype=int)


def perturb(p: wt.Parts, frac: float, rng: np.random.Generator) -> None:
    """Gaussian noise on every weight of the layers above layer 0, in the token subspaces: the entries of ``W_Q``,
    ``W_K``, ``W_V`` (rows: :func:`token_rows`; columns: head dimensions ``CODE..``) and of ``W_O`` (the transpose),
    at ``frac`` of the standard deviation of the layer's ``c_attn`` (resp. ``c_proj``) entries there. MLPs above layer
    0 are zero in every kind: no noise (their standard deviation is 0)."""
    rows = token_rows(p.res)
    if frac <= 0 or not len(rows):
        return
    c, codes = cp.CODE, np.arange(cp.CODE, p.res.shape.d_head)  # the head dimensions that carry codes
    for heads in p.heads[1:]:
        attn = np.concatenate([m[rows][:, c:].ravel() for h in heads for m in (h.Wq, h.Wk, h.Wv)])
        proj = np.concatenate([h.Wo[c:][:, rows].ravel() for h in heads])
        sd_attn, sd_proj = float(attn.std()), float(proj.std())
        for h in heads:
            for m in (h.Wq, h.Wk, h.Wv):
                m[np.ix_(rows, codes)] += rng.normal(0.0, frac * sd_attn, (len(rows), len(codes)))
            h.Wo[np.ix_(codes, rows)] += rng.normal(0.0, frac * sd_proj, (len(codes), len(rows)))


def member(i: int, seed: int = 0, max_d_model: int | None = None) -> Generated:
    """Model ``i`` of suite ``seed``: kind ``KIND_ORDER[i % 8]`` (8 in a row: every kind), seed ``1000 seed + i``."""
    return generate(1000 * seed + i, KIND_ORDER[i % len(KIND_ORDER)], max_d_model)


def suite(n: int, seed: int = 0, max_d_model: int | None = None) -> list[Generated]:  # the first n of suite seed
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n: {n!r} must be an integer >= 1")
    return [member(i, seed, max_d_model) for i in range(n)]


def card_markdown(g: Generated) -> str:
    """The model's card as Markdown: the answer (route, aggregator, ambiguity), what it is, and its layout."""
    c = g.card
    route = c["route"]
    asked = "".join(f", {k}={tuple(v) if isinstance(v, list) else v!r}" for k, v in c.get("asked", {}).items())
    lines = [
        f"# {g.name}: a generated known-answer GPT-2 ({c['kind']})",
        "",
        KINDS[c["kind"]][2] + ".",
        "",
        "Built by `gpt2_posheads.organism.generator.generate("
        f"{c['seed']}, {c['kind']!r}{asked})` from the heads of `gpt2_posheads.organism.compiled`: deterministic. "
        "Its answer was written down from the construction before anything was measured on it "
        "(`docs/known-answers.md`).",
        "",
        "## The answer",
        "",
        f"- route: **{route}** ({ROUTES[route]})" + (" — ambiguous by construction" if c["ambiguous"] else ""),
        f"- the sharp previous-token head (aggregator): {c.get('aggregator') or 'none'}",
    ]
    for key in ("counter", "early_heads", "early_kind", "relay_heads", "messy_heads", "induction_head"):
        if c.get(key):
            v = c[key]
            lines.append(f"- {key.replace('_', ' ')}: {', '.join(v) if isinstance(v, list) else v}")
    lines.append(f"- unrelated heads: {', '.join(c['unrelated_heads']) or 'none'}")
    lines.append(f"- noise in the token subspaces of layers >= 1: {c['noise']:.2%} of each tensor's deviation there")
    lines.append("")
    return "\n".join(lines + cp.layout_lines(g.model)) + "\n"


def write(g: Generated, out: Path, markdown: str | None = None, **options) -> Path:
    """A GPT-2 folder for ``g`` (``options``: :func:`~gpt2_posheads.organism.compiled.write_folder`'s) with its card:
    ``README.md`` (``markdown``, default :func:`card_markdown`) and ``card.json``, which a tool scored blind lacks."""
    folder = cp.write_folder(g.model, out, card_markdown(g) if markdown is None else markdown, **options)
    (Path(folder) / "card.json").write_text(json.dumps(g.card, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return Path(folder)

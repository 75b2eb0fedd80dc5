"""Sparse attention 7 (002): stacked causal attention without positional embeddings retrieves the
first and last tokens but loses the middle ("lost in the middle").

V 10, C 10, one head, no positional embeddings; target = the k-th token. Final loss against k for
1 layer (only k = C-1 retrievable) and 2 layers (U shape), n_embd {2, 10} x n_layers {2, 3}, and
with residual connections + MLPs (plateau replaced by spikes). Every k and seed of a setting trains
as one batched computation.

    gpt2-posheads toy_lost_in_middle            # 800 steps; 3 plain layers 5,000 (times: docs/posts/002-*.md)
    gpt2-posheads toy_lost_in_middle --three-layer-steps 800   # shorter; the 3-layer stacks stay at chance
    gpt2-posheads toy_lost_in_middle --quick
"""

import math

import numpy as np
import plotly.graph_objects as go

from gpt2_posheads.claims.toy import (
    RULE_ONLY_LAST,
    RULE_SPIKIER,
    RULE_U,
    middle_spread,
    num,
    only_last,
    spikier,
    spread,
    u_shape,
)
from gpt2_posheads.claims.toy import toy_claim as claim
from gpt2_posheads.cli import positive
from gpt2_posheads.toy import ToyConfig, train_sweep
from gpt2_posheads.toy.cli import base_config, robustness_section, toy_parser, toy_setup
from gpt2_posheads.toy.posts import THREE_LAYER_STEPS, lost_in_middle_grid

PLAIN = [(2, 2), (2, 10), (3, 2), (3, 10)]  # (n_layers, n_embd): the post's "embedding dimension and layers" grid
# Evaluations per run in the default run, which judges final losses only. Each evaluation (2,048 sequences
# per model) costs about 8 training steps (measured: 30 two-layer models, 200 steps, 50 evaluations 55 s,
# one 18 s); evaluating does not touch the training data, so how often changes no trajectory. The grid
# keeps the base's 50 (its runs are cached under that setting).
EVALS = 10


def settings(quick: bool, steps: int, three_layer_steps: int = THREE_LAYER_STEPS):
    """``(name, config changes)`` for each setting of the default run."""

    def plain(layers: int, embd: int) -> dict:
        return dict(n_layers=layers, n_embd=embd, **({"steps": max(steps, three_layer_steps)} if layers == 3 else {}))

    s = [("1 layer, n_embd 10", dict(n_layers=1, n_embd=10)), ("2 layers, n_embd 10", plain(2, 10))]
    if not quick:
        s += [(f"{l} layers, n_embd {e}", plain(l, e)) for l, e in PLAIN if (l, e) != (2, 10)]
        s += [
            ("2 layers, n_embd 10, residual + MLP", dict(n_layers=2, n_embd=10, residual=True, mlp=True)),
            ("3 layers, n_embd 10, residual + MLP", dict(n_layers=3, n_embd=10, residual=True, mlp=True)),
        ]
    return s


def main(argv=None):
    p = toy_parser(__doc__, steps=800, quick_steps=200)
    p.add_argument(
        "--three-layer-steps",
        type=int,
        default=THREE_LAYER_STEPS,
        help="training steps of the plain "
        f"3-layer stacks (default {THREE_LAYER_STEPS}: converged; they are still at chance after 800)",
    )
    p.set_defaults(seeds=3)
    args = p.parse_args(argv)
    positive("--three-layer-steps", args.three_layer_steps, 1)
    out, steps, runs = toy_setup(args, __file__)
    C, V = 10, 10
    base = base_config(args, steps, log_points=50, task="kth_token", V=V, C=C, n_heads=1, pos_emb=False)
    seeds = list(range(args.seed, args.seed + args.seeds))
    grid = {
        name: [
            [
                ToyConfig(
                    **{**base.__dict__, **kw, "k": k, "seed": s, "log_every": max(kw.get("steps", steps) // EVALS, 1)}
                )
                for s in seeds
            ]
            for k in range(C)
        ]
        for name, kw in settings(args.quick, steps, args.three_layer_steps)
    }
    flat = [c for rows in grid.values() for row in rows for c in row]
    n_steps = sorted({c.steps for c in flat})
    print(
        f"toy_lost_in_middle: {len(flat)} models: {len(grid)} settings x {C} positions k x {len(seeds)} seeds "
        f"({', '.join(f'{s:,}' for s in n_steps)} steps); every k and seed of a setting trains as one group",
        flush=True,
    )
    res = dict(zip([c.id() for c in flat], train_sweep(flat, runs, workers=args.workers)))
    fig = go.Figure()
    table, losses, claims, Q = {}, {}, [], args.quick
    for name, rows in grid.items():
        loss = np.array([[res[c.id()]["final_loss"] for c in row] for row in rows])  # [k, seed]
        losses[name] = loss
        table[name] = {
            "k": list(range(C)),
            "mean_final_loss": loss.mean(1).tolist(),
            "std": loss.std(1, ddof=1).tolist() if len(seeds) > 1 else [0.0] * C,
            "final_loss_by_seed": loss.tolist(),
            "steps": rows[0][0].steps,
        }
        fig.add_trace(
            go.Scatter(
                x=list(range(C)),
                y=table[name]["mean_final_loss"],
                error_y=dict(type="data", array=table[name]["std"]),
                mode="lines+markers",
                name=name,
            )
        )
    fig.add_hline(y=math.log(V), line_dash="dot", annotation_text="ln V (chance)")
    three = any(r[0][0].n_layers == 3 and not r[0][0].residual for r in grid.values())
    three_steps = max(steps, args.three_layer_steps)
    step_note = f"{steps:,} steps" + (f" ({three_steps:,} for the plain 3-layer stacks)" if three else "")
    fig.update_layout(
        title=f"final loss of retrieving the k-th of {C} tokens (V={V}, no positional embeddings)"
        f"<br><sup>mean ± sd over {len(seeds)} seeds; {step_note}</sup>",
        xaxis=dict(title="k (position of the target token)", dtick=1),
        yaxis_title="final loss (nats)",
    )
    out.figure(fig, "lost_in_middle", width=1100)

    def ends(name):
        m = losses[name].mean(1)
        return (
            f"k = 0: {num(m[0], 2)}, k = {C - 1}: {num(m[-1], 2)}, middle k = 2..{C - 3}: {num(m[2:-2].mean(), 3)} "
            f"nats (mean of {len(seeds)} seeds)"
        )

    one = losses["1 layer, n_embd 10"]
    m1 = one.mean(1)
    claims.append(
        claim(
            "1_layer_only_last",
            "1 layer, n_embd 10: only the current token (k = C-1) is retrieved",
            "only k = C-1 retrievable",
            RULE_ONLY_LAST,
            table["1 layer, n_embd 10"],
            only_last(one, V),
            quick=Q,
            shown=f"k = {C - 1}: {num(m1[-1], 2)} nats; k = 0..{C - 2}: {num(m1[:-1].min(), 3)}–"
            f"{num(m1[:-1].max(), 3)} nats (mean of {len(seeds)} seeds)",
        )
    )
    claims.append(
        claim(
            "2_layers_U_shape",
            "2 layers, n_embd 10: first and last tokens easy, the middle hard (lost in the middle)",
            "U shape",
            RULE_U,
            table["2 layers, n_embd 10"],
            u_shape(losses["2 layers, n_embd 10"], V),
            quick=Q,
            shown=ends("2 layers, n_embd 10"),
        )
    )
    for l, e in PLAIN:
        name = f"{l} layers, n_embd {e}"
        if (l, e) == (2, 10) or name not in table:
            continue
        claims.append(
            claim(
                f"U_shape ({name})",
                f"{name} ({table[name]['steps']:,} steps): the same U shape (only the first and last tokens "
                "retrieved reliably; a long plateau across the middle)",
                "U shape for n_embd {2, 10} x n_layers {2, 3}",
                RULE_U,
                table[name],
                u_shape(losses[name], V),
                quick=Q,
                shown=ends(name),
            )
        )
    for name in table:
        if "residual" not in name:
            continue
        layers = grid[name][0][0].n_layers
        plain = f"{layers} layers, n_embd 10"
        if plain not in losses:
            continue
        spread_res, spread_plain = middle_spread(losses[name]), middle_spread(losses[plain])
        claims.append(
            claim(
                f"plateau_broken ({name})",
                f"{name}: the middle plateau replaced by a spikier profile (than {layers} plain layers)",
                "spiky",
                RULE_SPIKIER,
                {"middle_std": spread_res.tolist(), "middle_std_without": spread_plain.tolist()},
                spikier(losses[name], losses[plain], f"{layers} plain layers", V),
                quick=Q,
                shown=f"spread over the middle {num(spread(spread_res)[0], 2)} nats vs "
                f"{num(spread(spread_plain)[0], 2)} without residual + MLP (mean of {len(seeds)} seeds)",
            )
        )
    robust = robustness_section(out, lost_in_middle_grid(C), base, args, runs, "002: lost in the middle")
    out.summary(
        {
            "steps": steps,
            "three_layer_steps": args.three_layer_steps,
            "seeds": seeds,
            "init_std": args.init_std,
            "lr": args.lr,
            "table": table,
            **({"robustness": robust} if robust else {}),
        },
        claims,
    )
    out.commit()

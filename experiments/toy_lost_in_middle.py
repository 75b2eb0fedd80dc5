"""Sparse attention 7 (002): stacked causal attention without positional embeddings retrieves the
first and last tokens but loses the middle ("lost in the middle").

V 10, C 10, one head, no positional embeddings; target = the k-th token. Final loss against k for
1 layer (only k = C-1 retrievable) and 2 layers (U shape), n_embd {2, 10} x n_layers {2, 3}, and
with residual connections + MLPs (plateau replaced by spikes). Every k and seed of a setting trains
as one batched computation.

    python experiments/toy_lost_in_middle.py            # 800 steps; 3 plain layers 5,000 (times: docs/benchmarks.md)
    python experiments/toy_lost_in_middle.py --three-layer-steps 800   # shorter; the 3-layer stacks stay at chance
    python experiments/toy_lost_in_middle.py --quick
"""

import math

import numpy as np
import plotly.graph_objects as go

from gpt2_posheads.claims.toy import RULE_ONLY_LAST, RULE_U, only_last, u_shape
from gpt2_posheads.claims.toy import toy_claim as claim
from gpt2_posheads.cli import main_entry, positive
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
    res = dict(zip([c.id() for c in flat], train_sweep(flat, runs, workers=args.workers)))
    fig = go.Figure()
    table, claims, Q = {}, [], args.quick
    for name, rows in grid.items():
        losses = np.array([[res[c.id()]["final_loss"] for c in row] for row in rows])  # [k, seed]
        mean, std = losses.mean(1), losses.std(1)
        table[name] = {
            "k": list(range(C)),
            "mean_final_loss": mean.tolist(),
            "std": std.tolist(),
            "steps": rows[0][0].steps,
        }
        fig.add_trace(
            go.Scatter(x=list(range(C)), y=mean, error_y=dict(type="data", array=std), mode="lines+markers", name=name)
        )
    fig.add_hline(y=math.log(V), line_dash="dot", annotation_text="ln V (chance)")
    three = any(r[0][0].n_layers == 3 and not r[0][0].residual for r in grid.values())
    three_steps = max(steps, args.three_layer_steps)
    step_note = f"{steps} steps" + (f" ({three_steps} for the plain 3-layer stacks)" if three else "")
    fig.update_layout(
        title=f"final loss of retrieving the k-th of {C} tokens (V={V}, no positional embeddings)"
        f"<br><sup>mean ± std over {len(seeds)} seeds; {step_note}</sup>",
        xaxis_title="k",
        yaxis_title="final loss (nats)",
    )
    out.figure(fig, "lost_in_middle", width=1100)

    one = np.array(table["1 layer, n_embd 10"]["mean_final_loss"])
    two = np.array(table["2 layers, n_embd 10"]["mean_final_loss"])
    claims.append(
        claim(
            "1_layer_only_last",
            "one layer retrieves only the current token (k = C-1)",
            "only k = C-1 retrievable",
            RULE_ONLY_LAST,
            one.tolist(),
            held=only_last(one, V),
            quick=Q,
        )
    )
    claims.append(
        claim(
            "2_layers_U_shape",
            "two layers: first and last tokens easy, the middle hard (lost in the middle)",
            "U shape",
            RULE_U,
            two.tolist(),
            held=u_shape(two, V),
            quick=Q,
        )
    )
    for l, e in PLAIN:
        name = f"{l} layers, n_embd {e}"
        if (l, e) == (2, 10) or name not in table:
            continue
        loss = np.array(table[name]["mean_final_loss"])
        claims.append(
            claim(
                f"U_shape ({name})",
                f"{name}: the same U shape (only the first and last tokens "
                "retrieved reliably; a long plateau across the middle)",
                "U shape for n_embd {2, 10} x n_layers {2, 3}",
                RULE_U,
                {"loss_by_k": loss.tolist(), "steps": table[name]["steps"]},
                held=u_shape(loss, V),
                quick=Q,
            )
        )
    for name in table:
        if "residual" in name:
            l = np.array(table[name]["mean_final_loss"])
            claims.append(
                claim(
                    f"plateau_broken ({name})",
                    "residual + MLP replace the middle plateau by a spikier profile",
                    "spiky",
                    "held if the spread (std) of the final loss over the middle "
                    "k = 2..C-3 exceeds the plain 2-layer model's",
                    {"middle_std": float(l[2:-2].std()), "middle_std_without": float(two[2:-2].std())},
                    held=float(l[2:-2].std()) > float(two[2:-2].std()),
                    quick=Q,
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


if __name__ == "__main__":
    main_entry(main)

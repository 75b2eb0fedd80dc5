"""The 2-layer lost-in-the-middle sweep (10 values of k x 4 seeds): batched vs one model at a time.

    python benchmarks/bench_toy_sweep.py [--steps 300]

Both train the same 40 models for the same steps; the batched sweep stacks them on the model axis.
Also checks that both give the same final losses. Then the same 40 models for 3x the steps as two
batched groups of 20: in this process with 2 threads, and in 2 worker processes of 1 thread each
(``train_sweep(workers=2)``, what the toy scripts do by default). Figures, one column per machine:
docs/benchmarks.md.
"""

import argparse
import time
from dataclasses import replace

import torch

from gpt2_posheads.toy import ToyConfig, train_group, train_sweep


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    a = p.parse_args()
    torch.set_num_threads(2)
    cfgs = [
        ToyConfig(task="kth_token", V=10, C=10, n_embd=10, n_layers=2, k=k, seed=s, steps=a.steps, log_every=a.steps)
        for k in range(10)
        for s in range(4)
    ]
    t = time.perf_counter()
    batched = train_group(cfgs, progress=False)
    tb = time.perf_counter() - t
    t = time.perf_counter()
    loop = [train_group([c], progress=False)[0] for c in cfgs]
    tl = time.perf_counter() - t
    diff = max(abs(x["final_loss"] - y["final_loss"]) for x, y in zip(batched, loop))
    timed, longer = {}, [replace(c, steps=3 * a.steps, log_every=3 * a.steps) for c in cfgs]
    for workers in (1, 2):
        t = time.perf_counter()
        train_sweep(longer, progress=False, max_models_per_group=20, workers=workers)
        timed[workers] = time.perf_counter() - t
    from gpt2_posheads.model.state import describe_line

    print(describe_line())
    print(f"40 models (k 0..9 x 4 seeds), 2 layers, {a.steps} steps, CPU threads 2")
    print(f"  one at a time: {tl:7.2f} s")
    print(f"  batched      : {tb:7.2f} s")
    print(f"speed-up: {tl / tb:.1f}x (target >= 5x); max |final loss difference| = {diff:.2e}")
    print(f"  2 groups of 20, {3 * a.steps} steps, one process, 2 threads  : {timed[1]:7.2f} s")
    print(
        f"  2 groups of 20, {3 * a.steps} steps, 2 processes of 1 thread : {timed[2]:7.2f} s  "
        f"({timed[1] / timed[2]:.2f}x; "
        "process start-up included)"
    )


if __name__ == "__main__":
    main()

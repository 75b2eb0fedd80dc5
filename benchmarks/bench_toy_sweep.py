"""The 2-layer lost-in-the-middle sweep (10 values of k x 4 seeds): batched vs one model at a time.

    python benchmarks/bench_toy_sweep.py [--steps 300]

Both train the same 40 models for the same steps; the batched sweep stacks them on the model axis.
Also checks that both give the same final losses.
"""
import argparse
import time

import torch

from gpt2_posheads.toy import ToyConfig, train_group


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    a = p.parse_args()
    torch.set_num_threads(2)
    cfgs = [ToyConfig(task="kth_token", V=10, C=10, n_embd=10, n_layers=2, k=k, seed=s, steps=a.steps,
                      log_every=a.steps) for k in range(10) for s in range(4)]
    t = time.perf_counter()
    batched = train_group(cfgs, progress=False)
    tb = time.perf_counter() - t
    t = time.perf_counter()
    loop = [train_group([c], progress=False)[0] for c in cfgs]
    tl = time.perf_counter() - t
    diff = max(abs(x["final_loss"] - y["final_loss"]) for x, y in zip(batched, loop))
    from gpt2_posheads.precision import describe_line

    print(describe_line())
    print(f"40 models (k 0..9 x 4 seeds), 2 layers, {a.steps} steps, CPU threads 2")
    print(f"  one at a time: {tl:7.2f} s")
    print(f"  batched      : {tb:7.2f} s")
    print(f"speed-up: {tl / tb:.1f}x (target >= 5x); max |final loss difference| = {diff:.2e}")


if __name__ == "__main__":
    main()

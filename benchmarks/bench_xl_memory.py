"""Loading a GPT-2-XL-shaped model and ranking all 1,200 of its heads on a CPU: peak memory against the weights, time
against the weight-matmul floor, and the TransformerLens bridge's own pass beside ours.

    python benchmarks/bench_xl_memory.py                  # 48 x 25 heads, d_model 1,600, 4 x 1,024 tokens
    python benchmarks/bench_xl_memory.py --n-layers 12 --n-heads 12 --d-model 768   # a quick GPT-2-small run
    python benchmarks/bench_xl_memory.py --load-only      # loading alone: load_model against TransformerLens's own
                                                          # processing (that one needs ~3.2x the weights; see below)
    python benchmarks/bench_xl_memory.py --route          # load_model, then the route read from the weights

The random-weight model (about 6.2 GB in float32) is built once per machine in the temp folder. Each variant
runs in its own process, loads the model, then ranks 4 prompts of 1,024 random tokens one prompt at a time:

- memory: the process's peak resident set while ranking (``VmHWM`` reset after loading) against the bytes of the
  model's parameters. ``growth`` is what the ranking adds on top of the loaded model (the weights' own pages
  included in the resident set, whatever the loader left behind is not the ranking's doing and is printed apart:
  freed heap the allocator keeps, pages of the safetensors file the loader mapped); and loading's own peak
  (``VmHWM`` before the reset) with its anonymous and file-backed parts sampled every 20 ms (:class:`PeakSampler`);
- time: against the floor, the same float32 weight matmuls on random activations (QKV of every layer, W_O and
  the MLP of all but the last), timed in the same run.

``--load-only`` runs two loading workers: ``load_model`` (the checkpoint read once into memory and processed layer by
layer, ``gpt2_posheads.model.memory``) and, as the baseline, TransformerLens's own ``boot_transformers`` +
``enable_compatibility_mode`` (the checkpoint mapped, the whole state dict processed at once), each reporting its
loading peak (``VmHWM``) against the loaded weights; ``--no-baseline`` skips the second (at the XL shape it needs about
20 GiB).

``--route`` runs one worker: ``load_model`` then ``posts.gpt2_prev_heads.weight_route.measure`` (every head's direct
and composed circuit, the label and the upstream contributions), reporting the loading time and peak, the route's
time and the process's peak while it runs (``VmHWM`` reset after loading) against the checkpoint's bytes, and what
the loaded model holds (its distinct storages: ``parameters()`` of the bridge lists some tensors twice, as views).

Bounds: loading peak <= 1.5x the weights; ranking peak <= 1.3x the weights, time <= 1.25x the floor; route peak
<= 1.3x the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch  # noqa: E402
from _common import fastest, matmul_floor, pattern_work, run_worker  # noqa: E402

XL = dict(n_layers=48, n_heads=25, d_model=1600, n_ctx=1024)


def status_kb(*keys: str) -> dict[str, float]:
    """Fields of ``/proc/self/status`` in MB (``VmRSS``, ``VmHWM``, ``RssFile``, ...)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in keys:
            out[k] = int(v.split()[0]) / 1024
    return out


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (``VmHWM``) of this process; False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class PeakSampler:
    """Largest anonymous and file-backed resident sets seen while a block runs (``/proc/self/status`` read every
    20 ms in a thread): ``VmHWM`` gives only their largest sum, and file-backed pages of a mapped checkpoint are
    clean pages the kernel can drop under memory pressure, anonymous ones it cannot."""

    def __init__(self) -> None:
        self.anon = self.file = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            s = status_kb("RssAnon", "RssFile")
            self.anon = max(self.anon, s.get("RssAnon", 0.0))
            self.file = max(self.file, s.get("RssFile", 0.0))

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def model_dir(shape: dict) -> Path:
    from gpt2_posheads import gpt2_tokenizer, make_random_model_dir

    tag = "_".join(str(shape[k]) for k in ("n_layers", "n_heads", "d_model", "n_ctx"))
    out = Path(tempfile.gettempdir()) / f"gpt2_posheads_bench_{tag}"
    if not (out / "model.safetensors").exists():
        print(f"building the random-weight model in {out} (once per machine) ...", flush=True)
        make_random_model_dir(out, tokenizer=gpt2_tokenizer(), **shape)
    return out


# aten ops of a ranking pass, by what they compute
_KINDS = {
    "weight matmuls": ("aten::addmm", "aten::mm", "aten::linear"),
    "attention scores and softmax": ("aten::baddbmm", "aten::_softmax", "aten::softmax"),
    "diagonal sums": ("aten::gather", "aten::sum", "aten::mul", "aten::index", "aten::expand"),
    "A v (not needed by the ranking)": ("aten::bmm", "aten::matmul"),
}


def profile_worker(shape: dict, threads: int, layers: int = 4) -> None:
    """Where a ranking pass spends its time: the fast path's ops on one ``n_ctx``-token prompt of a ``layers``-layer
    model of this width (every block but the last has the same ops), grouped by what they compute."""
    from torch.profiler import ProfilerActivity, profile

    from gpt2_posheads import load_model
    from gpt2_posheads.analysis.diagonals import diagonal_sums
    from gpt2_posheads.model.engine_fast import Workspace, fast_forward

    torch.set_num_threads(threads)
    model = load_model(model_dir({**shape, "n_layers": layers}), device="cpu")
    fast = fast_forward(model, "fast")
    n = shape["n_ctx"]
    toks = torch.randint(0, model.cfg.d_vocab, (1, n), generator=torch.Generator().manual_seed(0))
    ws = Workspace()

    def run():
        fast.patterns(toks, lambda l, p: diagonal_sums(p, n, True), ws)

    with torch.inference_mode():
        run()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
    totals: dict[str, float] = {}
    for e in prof.key_averages():
        kind = next((k for k, ops in _KINDS.items() if e.key in ops), None)
        if kind is not None:
            totals[kind] = totals.get(kind, 0.0) + e.self_cpu_time_total
    whole = sum(e.self_cpu_time_total for e in prof.key_averages())
    totals["everything else (LayerNorm, GELU, adds, copies)"] = whole - sum(totals.values())
    print(json.dumps({"which": "profile", "layers": layers, "share": {k: v / whole for k, v in totals.items()}}))


def held_bytes(model) -> int:
    """The bytes the parameters hold (a parameter released as a source copy holds none: gpt2_posheads.model.memory)."""
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage() for p in model.parameters()}
    return sum(s.nbytes() for s in storages.values())


def load_worker(which: str, shape: dict) -> None:
    """Load the model (``load``: ``load_model``; ``tl-load``: TransformerLens's own processing of the whole state dict,
    the checkpoint's mapped leftovers dropped after it) and report the loading peak against the weights."""
    from gpt2_posheads import load_model
    from gpt2_posheads.model.memory import release_source_copies

    start = time.perf_counter()
    with PeakSampler() as loading:
        if which == "load":
            model = load_model(model_dir(shape), device="cpu")
        else:
            from transformer_lens.model_bridge import TransformerBridge
            from transformers import AutoTokenizer

            folder = str(model_dir(shape))
            model = TransformerBridge.boot_transformers(
                folder, device="cpu", dtype=torch.float32, tokenizer=AutoTokenizer.from_pretrained(folder)
            )
            model.enable_compatibility_mode(disable_warnings=True)
            release_source_copies(model)
    seconds = time.perf_counter() - start
    peak = status_kb("VmHWM")["VmHWM"]
    after = status_kb("VmRSS", "RssFile")
    print(
        json.dumps(
            {
                "which": which,
                "load_seconds": seconds,
                "weights_mb": held_bytes(model) / 2**20,
                "load_peak_mb": peak,
                "load_peak_anon_mb": loading.anon,
                "load_peak_file_mb": loading.file,
                "rss_after_load_mb": after["VmRSS"],
                "file_backed_after_load_mb": after.get("RssFile", float("nan")),
            }
        )
    )


def route_worker(shape: dict) -> None:
    """``load_model`` then the weight route's ``measure``: times, peaks and sizes in MB."""
    from gpt2_posheads import load_model
    from gpt2_posheads.posts.gpt2_prev_heads.weight_route import measure

    folder = model_dir(shape)
    start = time.perf_counter()
    model = load_model(folder, device="cpu")
    load_s, load_peak = time.perf_counter() - start, status_kb("VmHWM")["VmHWM"]
    after = status_kb("VmRSS")["VmRSS"]
    can_reset = reset_peak()
    start = time.perf_counter()
    record = measure(model)["record"]
    seconds, peak = time.perf_counter() - start, status_kb("VmHWM")["VmHWM"]
    out = dict(which="route", seconds=seconds, load_seconds=load_s, load_peak_mb=load_peak, rss_after_load_mb=after)
    out.update(peak_mb=peak if can_reset else float("nan"), weights_mb=held_bytes(model) / 2**20)
    out["checkpoint_mb"] = sum(f.stat().st_size for f in folder.glob("*.safetensors")) / 2**20
    print(json.dumps(dict(out, head=record["head"], label=record["label"])))


def report_route(shape: dict, args: list[str], started: float) -> None:
    """``--route``: the route's time and peak against the checkpoint."""
    r = run_worker(__file__, ["route", *args])
    c = r["checkpoint_mb"]
    print(
        f"{shape['n_layers']} x {shape['n_heads']} heads, d_model {shape['d_model']}: checkpoint {c / 1024:.2f} GiB; "
        f"the loaded model's distinct storages {r['weights_mb'] / 1024:.2f} GiB = {r['weights_mb'] / c:.2f}x\n"
        f"  load_model: {r['load_seconds']:.0f} s, peak {r['load_peak_mb'] / 1024:.2f} GiB = "
        f"{r['load_peak_mb'] / c:.2f}x; resident after loading {r['rss_after_load_mb'] / 1024:.2f} GiB = "
        f"{r['rss_after_load_mb'] / c:.2f}x\n"
        f"  weight route: {r['seconds']:.0f} s, peak {r['peak_mb'] / 1024:.2f} GiB = {r['peak_mb'] / c:.2f}x the "
        f"checkpoint ({r['head']}: {r['label']})\n"
        f"bound: route peak <= 1.3x the checkpoint; run took {time.perf_counter() - started:.0f} s"
    )


def worker(which: str, shape: dict, n_prompts: int, threads: int) -> None:
    torch.set_num_threads(threads)
    n = shape["n_ctx"]
    if which in ("load", "tl-load"):
        return load_worker(which, shape)
    if which == "route":
        return route_worker(shape)
    if which == "profile":
        return profile_worker(shape, threads)
    if which == "floor":  # the weight matmuls; the attention, GELU and diagonal sums beside them (prompt by prompt)
        d, L, H = shape["d_model"], shape["n_layers"], shape["n_heads"]
        floor = fastest(lambda: matmul_floor(d, L, n_prompts * n, n), calls=2)
        pattern = fastest(lambda: pattern_work(d, L, H, n_prompts, n, batch=1, n_offsets=n), calls=2)
        print(json.dumps({"which": which, "seconds": floor, "pattern_seconds": pattern}))
        return
    from gpt2_posheads import load_model, prev_token_ranking

    start = time.perf_counter()
    with PeakSampler() as loading:
        model = load_model(model_dir(shape), device="cpu")
    load_s = time.perf_counter() - start
    load_peak = status_kb("VmHWM")["VmHWM"]
    weights = held_bytes(model)
    checkpoint = sum(f.stat().st_size for f in model_dir(shape).glob("*.safetensors"))
    after = status_kb("VmRSS", "RssFile", "RssAnon")
    toks = torch.randint(0, model.cfg.d_vocab, (n_prompts, n), generator=torch.Generator().manual_seed(0))
    can_reset = reset_peak()
    start = time.perf_counter()
    ranking = prev_token_ranking(
        model, toks, batch_size=1, progress=False, engine="fast" if which == "ours" else "hooks"
    )
    seconds = time.perf_counter() - start
    peak = status_kb("VmHWM")["VmHWM"]
    print(
        json.dumps(
            {
                "which": which,
                "seconds": seconds,
                "load_seconds": load_s,
                "weights_mb": weights / 2**20,
                "checkpoint_mb": checkpoint / 2**20,
                "rss_after_load_mb": after["VmRSS"],
                "file_backed_after_load_mb": after.get("RssFile", float("nan")),
                "load_peak_mb": load_peak,
                "load_peak_anon_mb": loading.anon,
                "load_peak_file_mb": loading.file,
                "peak_mb": peak if can_reset else float("nan"),
                "heads": len(ranking),
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", default=None)
    p.add_argument("--n-layers", type=int, default=XL["n_layers"])
    p.add_argument("--n-heads", type=int, default=XL["n_heads"])
    p.add_argument("--d-model", type=int, default=XL["d_model"])
    p.add_argument("--n-ctx", type=int, default=XL["n_ctx"])
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-baseline", action="store_true", help="skip the TransformerLens-hooks pass")
    p.add_argument("--profile", action="store_true", help="only the time shares of one pass (a 4-layer model)")
    p.add_argument("--load-only", action="store_true", help="only loading: load_model against TransformerLens's own")
    p.add_argument("--route", action="store_true", help="only load_model then the weight route (weight_route.measure)")
    a = p.parse_args()
    shape = dict(n_layers=a.n_layers, n_heads=a.n_heads, d_model=a.d_model, n_ctx=a.n_ctx)
    if a.worker:
        return worker(a.worker, shape, a.n_prompts, a.threads)
    from gpt2_posheads.model.state import describe_line

    print(describe_line())
    model_dir(shape)
    args = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()] + [
        f"--n-prompts={a.n_prompts}",
        f"--threads={a.threads}",
    ]
    started = time.perf_counter()
    if a.profile:
        prof = run_worker(__file__, ["profile", *args])
        print(f"time shares of one ranking pass ({prof['layers']}-layer model of this width, 1 x {a.n_ctx} tokens):")
        for k, v in prof["share"].items():
            print(f"  {k:48s} {v:6.1%}")
        return
    if a.load_only:
        return report_loading(shape, args, a.no_baseline, started)
    if a.route:
        return report_route(shape, args, started)
    ours = run_worker(__file__, ["ours", *args])
    floor = run_worker(__file__, ["floor", *args])
    base = None if a.no_baseline else run_worker(__file__, ["hooks", *args])
    L, H = shape["n_layers"], shape["n_heads"]
    print(
        f"{L} x {H} heads ({L * H}), d_model {shape['d_model']}, {a.n_prompts} x {shape['n_ctx']} tokens, "
        f"{a.threads} threads; weights {ours['weights_mb'] / 1024:.2f} GiB (float32)"
    )
    w = ours["weights_mb"]
    for label, r in (("ours (fast path)", ours), ("TransformerLens hooks", base)):
        if r is None:
            continue
        growth = r["peak_mb"] - r["rss_after_load_mb"]
        print(
            f"  {label:22s}: {r['seconds']:7.1f} s = {r['seconds'] / floor['seconds']:.2f}x the floor | "
            f"ranking peak {r['peak_mb'] / 1024:.2f} GiB = {r['peak_mb'] / w:.2f}x the weights; "
            f"weights + the ranking's growth {(w + growth) / 1024:.2f} GiB = {(w + growth) / w:.2f}x | "
            f"after loading {r['rss_after_load_mb'] / 1024:.2f} GiB ({r['file_backed_after_load_mb'] / 1024:.2f} "
            f"file-backed), loading peak {r['load_peak_mb'] / 1024:.2f} GiB = {r['load_peak_mb'] / w:.2f}x "
            f"(largest sampled every 20 ms: anonymous {r['load_peak_anon_mb'] / 1024:.2f} GiB = "
            f"{r['load_peak_anon_mb'] / w:.2f}x, file-backed {r['load_peak_file_mb'] / 1024:.2f} GiB) "
            f"in {r['load_seconds']:.0f} s"
        )
    print(f"  {'float32 matmuls alone':22s}: {floor['seconds']:7.1f} s (the floor of any exact method)")
    must, ratio = floor["pattern_seconds"], (floor["seconds"] + floor["pattern_seconds"]) / floor["seconds"]
    print(
        f"  {'+ attention, GELU, sums':22s}: {must:7.1f} s more: floor + that = {ratio:.2f}x the floor (scores, causal "
        "softmax, pattern x values, GELU and the diagonal sums, alone; LayerNorm, biases and residual adds left out: "
        "an exact pass written with torch's primitives takes longer)"
    )
    print(
        f"  weights: the loaded model's parameters hold {w / 1024:.2f} GiB (its checkpoint: "
        f"{ours['checkpoint_mb'] / 1024:.2f} GiB); "
        f"ranking peak / checkpoint = {ours['peak_mb'] / ours['checkpoint_mb']:.2f}x"
    )
    print(
        "bounds: loading peak <= 1.5x the weights; ranking peak <= 1.3x the weights, time <= 1.25x the floor; "
        f"run took {time.perf_counter() - started:.0f} s"
    )


def report_loading(shape: dict, args: list[str], no_baseline: bool, started: float) -> None:
    """``--load-only``: each loader's peak against the weights it loaded, and ours against the baseline's."""
    runs = [("load_model (one copy)", run_worker(__file__, ["load", *args]))]
    if not no_baseline:
        runs.append(("TransformerLens's processing", run_worker(__file__, ["tl-load", *args])))
    L, H = shape["n_layers"], shape["n_heads"]
    print(f"{L} x {H} heads, d_model {shape['d_model']}; weights {runs[0][1]['weights_mb'] / 1024:.2f} GiB (float32)")
    for label, r in runs:
        w = r["weights_mb"]
        print(
            f"  {label:30s}: loading peak {r['load_peak_mb'] / 1024:.2f} GiB = {r['load_peak_mb'] / w:.2f}x "
            "the weights "
            f"(largest sampled every 20 ms: anonymous {r['load_peak_anon_mb'] / 1024:.2f} GiB, file-backed "
            f"{r['load_peak_file_mb'] / 1024:.2f} GiB); after loading {r['rss_after_load_mb'] / 1024:.2f} GiB "
            f"({r['file_backed_after_load_mb'] / 1024:.2f} file-backed); {r['load_seconds']:.0f} s"
        )
    if len(runs) == 2:
        print(f"  load_model's peak / the baseline's: {runs[0][1]['load_peak_mb'] / runs[1][1]['load_peak_mb']:.2f}")
    print(f"bound: loading peak <= 1.5x the weights; run took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

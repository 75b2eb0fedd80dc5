"""Every experiment script runs end to end on a tiny model (or in --quick mode) and writes its outputs."""

import json
import shutil
from types import SimpleNamespace

import pytest

from gpt2_posheads.claims.record import MANIFEST
from gpt2_posheads.cli.experiment import model_identity
from gpt2_posheads.model.paths import GPT2_W_POS

from conftest import EXPERIMENTS, MINI_DIR, load_script, run_script


@pytest.fixture(scope="module")
def script_model(tmp_path_factory, small_tokenizer):
    from gpt2_posheads import make_random_model_dir

    return make_random_model_dir(
        tmp_path_factory.mktemp("script_model"),
        n_layers=3,
        n_heads=4,
        d_model=32,
        n_ctx=256,
        tokenizer=small_tokenizer,
        seed=2,
    )


W = ["--prompts", "wikitext"]
GPT2_SCRIPTS = {
    "rank_prev_heads": W + ["--n-prompts", "3", "--seq-len", "48"],
    "pos_embed_helix": ["--layer", "2", "--n-prompts", "2", "--seq-len", "64"],
    "ext_pos_vs_wpe": ["--n-prompts", "2", "--n-token-dependence", "2", "--seq-len", "64"],
    "pos_embed_averaging": W
    + ["--heads", "L1H0,L2H1", "--group-sizes", "1,5,20", "--n-prompts", "2", "--seq-len", "48"],
    "mask_prev_attention": W
    + ["--heads", "L2H1", "--n-prompts", "2", "--seq-len", "48", "--start", "5", "--size", "20"],
    "raw_scores_taxonomy": W
    + ["--heads", "L0H0,L2H3", "--n-prompts", "2", "--seq-len", "48", "--start", "5", "--size", "20"],
    "ext_pos_averaging": W
    + [
        "--heads",
        "L1H0,L2H1",
        "--n-prompts",
        "2",
        "--seq-len",
        "48",
        "--start",
        "5",
        "--size",
        "20",
        "--ext-prompts",
        "2",
    ],
    "l4h11_edit": ["--heads", "L2H1", "--factors", "1,2"],
    "prev_head_sources": W + ["--heads", "L2H1", "--n-prompts", "2", "--seq-len", "48"],
    "weight_route": ["--n-positions", "32"],
    "cache_activations": W + ["--heads", "L1H0", "--n-prompts", "2", "--seq-len", "48", "--ext-prompts", "2"],
}


@pytest.mark.parametrize("script", sorted(GPT2_SCRIPTS))
def test_gpt2_script_runs_on_tiny_model(script, script_model, tmp_path):
    out = tmp_path / ("cache.safetensors" if script == "cache_activations" else "out")
    run_script(
        EXPERIMENTS / f"{script}.py",
        ["--model-dir", str(script_model), "--out", str(out), "--no-png"] + GPT2_SCRIPTS[script],
    )
    if script == "cache_activations":
        assert out.stat().st_size > 0
        return
    summary = json.loads((out / "summary.json").read_text())
    assert summary and list(out.glob("*.html"))
    for c in summary["claims"]:  # one vocabulary, each verdict with its rule and the reason
        assert set(c) >= {"claim", "post", "measured", "rule", "verdict", "why"}
        assert c["verdict"] in ("held", "not held", "not testable") and c["rule"]
    check_numbers(script, out, summary)
    # a random model has no mechanism: nothing about it may be "held" by accident (W_pos's helix: the test's model
    # is random, so that too)
    assert not [(c["key"], c["why"]) for c in summary["claims"] if c["verdict"] == "held"]


def check_numbers(script: str, out, summary: dict) -> None:
    """Identities every run must satisfy, whatever the model: the numbers, not only the keys."""
    import pandas as pd

    claims = {c["key"]: c for c in summary["claims"]}
    if script == "rank_prev_heads":
        r = pd.read_csv(out / "ranking.csv")
        assert (r.ratio - r.second_mass / r.top_mass).abs().max() < 1e-6  # the ratio is second / top mass
        # previous-token heads first, sharpest first; then the rest by previous-token mass
        prev, rest = r[r.is_prev_token], r[~r.is_prev_token]
        assert list(r["rank"]) == list(range(1, len(r) + 1)) and r.is_prev_token.is_monotonic_decreasing
        assert prev.ratio.is_monotonic_increasing and rest.prev_mass.is_monotonic_decreasing
        assert (
            summary["n_prev_token_heads"]
            == int(r.is_prev_token.sum())
            == claims["half_prev_heads"]["measured"]["n_prev"]
        )
        assert (r.is_prev_token == (r.top_offset == 1)).all()
        sharp = r[r.is_prev_token].iloc[0] if r.is_prev_token.any() else r.iloc[0]
        assert summary["aggregator"] == sharp["name"]
    if script == "pos_embed_averaging":
        r = pd.read_csv(out / "pos_embed_averaging.csv").set_index("group_size")
        assert abs(r.loc[1, "kl"]) < 1e-6  # groups of one are the identity
        assert r.loc[5, "kl"] > 1e-6  # and groups of five are not


def test_helix_of_real_w_pos(tmp_path):
    run_script(
        EXPERIMENTS / "pos_embed_helix.py",
        ["--w-pos", str(GPT2_W_POS), "--out", str(tmp_path), "--no-png"],
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    evr = summary["w_pos"]["explained_variance_top4"]
    assert abs(sum(evr[:3]) - 0.90) < 0.02 and evr[3] < 0.05  # the published 33%, 32%, 25%; then 3.5%
    assert summary["claims"][0]["verdict"] == "held"


def test_unknown_head_is_a_usage_error(script_model, tmp_path):
    from gpt2_posheads import UsageError

    with pytest.raises(UsageError, match="unknown head L4H11"):
        run_script(
            EXPERIMENTS / "l4h11_edit.py",
            ["--model-dir", str(script_model), "--out", str(tmp_path), "--no-png", "--heads", "L4H11"],
        )


def test_default_heads_are_the_models_own(script_model, tmp_path):
    """On any model but GPT-2 small the post's head names are not defaults: the script measures the model's own
    aggregator (its sharpest previous-token head) and says so."""

    from gpt2_posheads import load_model, prev_token_ranking
    from gpt2_posheads.analysis.diagonals import choose_aggregator
    from gpt2_posheads.cli import corpus_prompts

    argv = ["--model-dir", str(script_model), "--out", str(tmp_path), "--no-png", "--prompts", "wikitext"]
    run_script(EXPERIMENTS / "l4h11_edit.py", argv)
    s = json.loads((tmp_path / "summary.json").read_text())
    model = load_model(script_model, device="cpu")
    prompts, _ = corpus_prompts(model, SimpleNamespace(prompts="wikitext", n_prompts=8, seq_len=128, seed=0))
    l, h = choose_aggregator(prev_token_ranking(model, prompts, progress=False))
    assert s["heads"] == [f"L{l}H{h}"] and "aggregator" in s["heads_chosen"]
    assert s["claims"][0]["head"] == f"L{l}H{h}"


def fake_runner(results, calls, interrupt_at=None):
    """A stand-in for running a script: writes a summary the way the script would (the scripts themselves are
    tested above; here: the orchestration and the page)."""

    def run(name, args, check=False, env=None):
        calls.append((name, args))
        if name == interrupt_at:
            return 130
        flag = next((f for f in ("--model-dir", "--model") if f in args), None)
        model = args[args.index(flag) + 1] if flag else None
        out = results / name / (model.rstrip("/").split("/")[-1] if model else "")
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(
            json.dumps(
                {
                    "script": name,
                    "model": model,
                    "figures": ["f.html"],
                    "finished_at": "2026-11-23T10:00:00+00:00",
                    "claims": [
                        {
                            "key": f"{name}_c",
                            "claim": f"claim of {name}",
                            "post": "0.01",
                            "measured": {"ratio": 0.0123456},
                            "rule": "held if x",
                            "verdict": "held" if model and "wpos" not in model else "not held",
                            "why": "w",
                            "head": "L1H2",
                        }
                    ],
                }
            )
        )
        if flag:  # the manifest names the model and its weights, as a script's does (what --resume compares)
            given = SimpleNamespace(model_dir=model if flag == "--model-dir" else None, model=model)
            manifest = {"script": name, "files": ["summary.json"], "model": model_identity(given)}
            (out / MANIFEST).write_text(json.dumps(manifest))
        return 0

    return run


def test_run_all_runs_every_script_per_model_and_writes_the_page(tmp_path, monkeypatch):
    from gpt2_posheads.claims.catalogue import model_scripts, toy_scripts

    run_all = load_script("run_all")
    calls = []
    dirs = []
    for name in ("mini-gpt2", "my-model"):  # two model folders (the runner never loads them here)
        d = tmp_path / "models" / name
        shutil.copytree(MINI_DIR, d)
        dirs.append(str(d))
    config = json.loads((d / "config.json").read_text())  # another model: its own weights fingerprint, its own column
    (d / "config.json").write_text(json.dumps({**config, "initializer_range": 0.03}))
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path)
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path, calls))
    assert run_all.main(["--models", "", "--model-dirs", ",".join(dirs), "--quick", "--no-explorer"]) == 0
    assert [n for n, _ in calls] == [s for s in model_scripts() for _ in (0, 1)] + list(toy_scripts())
    assert all("--quick" in a for n, a in calls if n.startswith("toy_"))
    page = (tmp_path / "index.html").read_text()
    # grouped by post, one column per model, numbers for a person (no JSON), the head named
    assert page.index("004: The positional embedding") < page.index("003: Sparse attention 1")
    assert f"<th>{dirs[0]}</th><th>{dirs[1]}</th>" in page
    assert "ratio 0.0123" in page and "{" not in page.split("<body>")[1].split("<style>")[0].replace("{{", "")
    assert "on L1H2" in page and "measured 2026-11-23 10:00" in page
    record = json.loads((tmp_path / "run_all.json").read_text())
    assert {j["status"] for j in record["jobs"]} == {"ok"} and not record["interrupted"]


def test_run_all_on_the_route_model_ends_with_its_organism_report(tmp_path, monkeypatch):
    """The main job's jobs, in order: with route-gpt2 among the models, every script on it, the toy scripts, then the
    organism report on it from the scripts' results (tests/cli/test_fresh_clone.py runs them all, under -m slow)."""
    from gpt2_posheads.claims.catalogue import model_scripts, toy_scripts

    run_all = load_script("run_all")
    calls = []
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path)
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path, calls))
    assert run_all.main(["--quick", "--models", "route-gpt2", "--no-explorer", "--no-png"]) == 0
    assert [n for n, _ in calls] == list(model_scripts()) + list(toy_scripts()) + ["mini_gpt2_report"]
    assert calls[-1][1][:3] == ["--model", "route-gpt2", "--skip-scripts"]
    record = json.loads((tmp_path / "run_all.json").read_text())
    assert [j["script"] for j in record["jobs"]] == [n for n, _ in calls]
    assert {j["status"] for j in record["jobs"]} == {"ok"} and (tmp_path / "index.html").is_file()


def test_run_all_interrupted_still_writes_a_page_that_says_so(tmp_path, monkeypatch):

    run_all = load_script("run_all")
    calls = []
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path)
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path, calls, interrupt_at="mask_prev_attention"))
    assert run_all.main(["--models", "mini-gpt2", "--no-explorer"]) == 130
    record = json.loads((tmp_path / "run_all.json").read_text())
    status = {j["script"]: j["status"] for j in record["jobs"]}
    assert status["rank_prev_heads"] == "ok" and status["mask_prev_attention"] == "interrupted"
    assert status["l4h11_edit"] == "not run" and record["interrupted"]
    page = (tmp_path / "index.html").read_text()
    scripts = [j["script"] for j in record["jobs"]]
    after = len(scripts) - scripts.index("mask_prev_attention") - 1  # every job after the interrupted one
    assert after >= 8 and list(status.values()).count("not run") == after
    assert f"did not finish every script (1 interrupted, {after} not run)" in page
    assert "no results: interrupted" in page and "no results: not run" in page
    # --resume runs what did not finish, and only that
    calls.clear()
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path, calls))
    assert run_all.main(["--models", "mini-gpt2", "--no-explorer", "--resume"]) == 0
    assert "rank_prev_heads" not in [n for n, _ in calls] and calls[0][0] == "mask_prev_attention"
    record = json.loads((tmp_path / "run_all.json").read_text())
    assert {j["status"] for j in record["jobs"]} == {"ok"} and not record["interrupted"]


def test_run_all_that_fails_changes_no_page_explorer_or_record(tmp_path, monkeypatch, capsys):
    """A `--resume` that meets an unreadable summary: one line, status 2, and the page, the explorers and
    `run_all.json` (its start time included) exactly as they were; no staging folder or lock left. What a job
    killed outright left in the results (a staging folder, a lock) is removed by that next job, and said."""
    import socket
    import subprocess
    import sys

    from gpt2_posheads.cli.args import main_entry
    from gpt2_posheads.cli.output import LOCK

    run_all = load_script("run_all")
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path)
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path, []))
    monkeypatch.setattr(run_all, "load_model", lambda name, device=None: name)  # the explorer's work is tested apart
    monkeypatch.setattr(run_all, "write_explorer", lambda model, path, name: path.write_text(f"explorer of {name}"))
    argv = ["--models", "mini-gpt2", "--only", "rank_prev_heads"]
    assert main_entry(run_all.main, argv) == 0
    kept = ["run_all.json", "index.html", "explorer/mini-gpt2.html"]
    before = {f: (tmp_path / f).read_bytes() for f in kept}
    (tmp_path / "rank_prev_heads" / "mini-gpt2" / "summary.json").write_text('{"claims": [')
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    staging = tmp_path / "rank_prev_heads" / f".mini-gpt2.partial-{dead}"
    staging.mkdir()
    lock = tmp_path / "rank_prev_heads" / "mini-gpt2" / LOCK
    lock.write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "script": "rank_prev_heads"}))
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main_entry(run_all.main, [*argv, "--resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err[-1].startswith("error: results: ") and "cannot be read" in err[-1]
    assert {f: (tmp_path / f).read_bytes() for f in kept} == before
    assert f"note: removed {staging}, left by a run that ended without finishing (pid {dead})" in err
    assert not staging.exists() and not lock.exists() and not (tmp_path / LOCK).exists()
    assert not list(tmp_path.glob(".explorer.partial-*"))


def test_run_all_stopped_before_it_wrote_anything_leaves_no_results_folder(tmp_path, monkeypatch):
    from gpt2_posheads.cli.args import main_entry

    def interrupt():
        raise KeyboardInterrupt

    run_all = load_script("run_all")
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path / "results")
    monkeypatch.setattr(run_all, "png_support", interrupt)  # Ctrl-C while the job sets up
    with pytest.raises(SystemExit) as e:
        main_entry(run_all.main, ["--models", "mini-gpt2", "--only", "rank_prev_heads"])
    assert e.value.code == 130 and list(tmp_path.iterdir()) == []


def handset_folder(folder, tokenizer, scale: float):
    """The hand-set model of conftest (layer 0's head 0 attends to the previous position) with its heads' query and
    key weights times ``scale``: a smaller scale, a softer previous-token head."""
    from gpt2_posheads import make_random_model_dir

    from conftest import HANDSET, handset_state_dict

    state = handset_state_dict(len(tokenizer), scale)
    return make_random_model_dir(folder, tokenizer=tokenizer, state_dict=state, **HANDSET)


def test_run_all_resume_after_the_weights_changed_measures_the_new_weights(
    tmp_path, small_tokenizer, monkeypatch, capsys
):
    """The main job on one small model folder and one script (--only rank_prev_heads, in this process: the whole path
    a resume takes, in seconds), into --out; then the folder's weights are replaced by the same model with its
    previous-token head softened (other ratios, another fingerprint). --resume must say that the script reruns and
    why, and leave the results a fresh run of the script on the new weights gives (an independent run into another
    folder), not the old ones; a second --resume keeps them. Nothing is written to ./results."""
    from gpt2_posheads.claims.record import recorded_fingerprint
    from gpt2_posheads.cli.args import main_entry
    from gpt2_posheads.model.folder import folder_fingerprint

    monkeypatch.chdir(tmp_path)
    model = handset_folder(tmp_path / "models" / "handset", small_tokenizer, 1.0)
    out = tmp_path / "elsewhere"
    argv = ["--models", "", "--model-dirs", str(model), "--only", "rank_prev_heads", "--no-explorer", "--no-png"]
    argv += ["--out", str(out)]
    run_all = load_script("run_all")
    assert main_entry(run_all.main, argv) == 0
    folder = out / "rank_prev_heads" / "handset"
    old, old_fp = (folder / "ranking.csv").read_text(), folder_fingerprint(model)
    soft = handset_folder(tmp_path / "v2" / "handset", small_tokenizer, 0.5)
    shutil.copy(soft / "model.safetensors", model / "model.safetensors")
    new_fp = folder_fingerprint(model)
    capsys.readouterr()
    assert main_entry(run_all.main, [*argv, "--resume"]) == 0
    said = capsys.readouterr().out
    assert f"rank_prev_heads --model-dir {model}: rerun: the weights changed ({old_fp} -> {new_fp})" in said
    fresh = tmp_path / "fresh"
    main_entry(load_script("rank_prev_heads").main, ["--model-dir", str(model), "--no-png", "--out", str(fresh)])
    assert (folder / "ranking.csv").read_text() == (fresh / "ranking.csv").read_text() != old
    assert recorded_fingerprint(folder) == new_fp != old_fp
    record = json.loads((out / "run_all.json").read_text())
    assert record["fingerprints"] == {str(model): new_fp} and [j["status"] for j in record["jobs"]] == ["ok"]
    assert main_entry(run_all.main, [*argv, "--resume"]) == 0
    said = capsys.readouterr().out
    assert "rerun" not in said and "resuming: 1 of 1 scripts" in said and "rank_prev_heads: ok" not in said
    assert (out / "index.html").is_file() and not (tmp_path / "results").exists()


def test_run_all_resume_reruns_what_finished_with_other_options(tmp_path, monkeypatch, capsys):
    """--quick is an option of the toy scripts: a job finished with it reruns without it, and says so; one finished
    with the options asked now is kept."""
    run_all = load_script("run_all")
    calls = []
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path)
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path, calls))
    argv = ["--models", "", "--only", "toy_prev_token,toy_sticky_plateau", "--no-explorer", "--no-png"]
    assert run_all.main([*argv, "--quick"]) == 0
    calls.clear()
    capsys.readouterr()
    assert run_all.main([*argv, "--resume"]) == 0
    said = capsys.readouterr().out
    for name in ("toy_prev_token", "toy_sticky_plateau"):
        assert f"{name}: rerun: the options changed (--quick -> none)" in said
    assert sorted(n for n, _ in calls) == ["toy_prev_token", "toy_sticky_plateau"]
    assert all("--quick" not in a for _, a in calls)
    calls.clear()
    assert run_all.main([*argv, "--resume"]) == 0 and calls == []
    assert "resuming: 2 of 2 scripts" in capsys.readouterr().out


def test_run_all_takes_a_model_folder_whose_name_holds_a_comma(tmp_path, monkeypatch, capsys):
    """`--model-dirs` is comma-separated, yet a folder named `my,model` is one folder (the pieces that name an
    existing path together are taken whole); a missing piece is named with the text it was split from, never as a
    folder of its own."""
    from gpt2_posheads.cli.args import main_entry

    comma = tmp_path / "models" / "my,model"
    shutil.copytree(MINI_DIR, comma)
    run_all = load_script("run_all")
    calls = []
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path / "results")
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path / "results", calls))
    argv = ["--models", "", "--only", "rank_prev_heads", "--no-explorer", "--no-png"]
    assert main_entry(run_all.main, [*argv, "--model-dirs", f"{comma},{MINI_DIR}"]) == 0
    assert [a[:2] for _, a in calls] == [["--model-dir", str(comma)], ["--model-dir", str(MINI_DIR)]]
    given = f"{tmp_path / 'models' / 'your'},model"
    with pytest.raises(SystemExit) as e:
        main_entry(run_all.main, [*argv, "--model-dirs", given])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: --model-dirs: ")
    assert f"(a piece of {given!r}, split at its commas)" in err[0]


def test_run_all_out_that_is_a_file_is_one_line(tmp_path, capsys):
    from gpt2_posheads.cli.args import main_entry

    (tmp_path / "a_file").write_text("x")
    with pytest.raises(SystemExit) as e:
        main_entry(
            load_script("run_all").main, ["--models", "", "--only", "toy_prev_token", "--out", f"{tmp_path}/a_file/r"]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        f"error: --out: {tmp_path}/a_file is a file, so {tmp_path}/a_file/r cannot be made; a folder (new, empty, or "
        "one the toolkit wrote); choose another --out"
    ]


def test_run_all_shows_one_model_given_two_ways_as_one_column(tmp_path, monkeypatch):
    """`--models mini-gpt2` and `--model-dirs <its folder>` are one model (one weights fingerprint): one column
    headed with both names, every cell filled; another model is its own column."""
    from gpt2_posheads.model.paths import ORGANISM_DIR

    other = tmp_path / "models" / "my-model"
    shutil.copytree(MINI_DIR, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "initializer_range": 0.03}))
    run_all = load_script("run_all")
    monkeypatch.setattr(run_all, "results_root", lambda: tmp_path)
    monkeypatch.setattr(run_all, "run_here", fake_runner(tmp_path, []))
    argv = ["--models", "mini-gpt2", "--model-dirs", f"{ORGANISM_DIR},{other}", "--only", "rank_prev_heads"]
    assert run_all.main([*argv, "--no-explorer"]) == 0
    page = (tmp_path / "index.html").read_text()
    head = page.split("004: The positional embedding")[1].split("</tr>")[0]
    assert head.count("<th>") == 4 and f"<th>mini-gpt2 (also {ORGANISM_DIR})</th><th>{other}</th>" in head
    assert "no results" not in page and '<td class="none">not measured</td>' not in page


def test_module_entry_point_lists_and_rejects(capsys):
    from gpt2_posheads.__main__ import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert "rank_prev_heads" in out and "prev_head_sources" in out
    assert main(["rank_prev_head"]) == 2
    assert "did you mean rank_prev_heads" in capsys.readouterr().err


def test_offline_hub_model_exits_with_message(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from gpt2_posheads import UsageError

    with pytest.raises(UsageError, match="local"):
        run_script(EXPERIMENTS / "rank_prev_heads.py", ["--model", "some-org/not-cached", "--out", str(tmp_path)])


@pytest.mark.parametrize(
    "script", ["toy_sticky_plateau", "toy_similar_content", "toy_prev_token", "toy_lost_in_middle"]
)
def test_toy_script_quick(script, tmp_path):
    run_script(EXPERIMENTS / f"{script}.py", ["--quick", "--out", str(tmp_path), "--no-png", "--steps", "60"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["quick"] and summary["claims"]
    # a --quick run is a smoke test: none of its claims may be judged
    assert {c["verdict"] for c in summary["claims"]} == {"not testable"}
    assert list((tmp_path / "runs").glob("*.json"))


@pytest.mark.parametrize(
    "groups, untestable",
    [
        ("1,5,50", {"avg_output_unchanged", "avg_breaks_down", "avg_prev_heads_unaffected"}),  # no 10, no 20
        ("1,10,20", {"avg_breaks_down"}),  # nothing of 50 or more to break down at
    ],
)
def test_averaging_claims_without_their_group_sizes_are_not_testable(groups, untestable, script_model, tmp_path):
    argv = ["--model-dir", str(script_model), "--out", str(tmp_path), "--no-png", *W, "--heads", "L1H0"]
    run_script(
        EXPERIMENTS / "pos_embed_averaging.py", argv + ["--group-sizes", groups, "--n-prompts", "2", "--seq-len", "48"]
    )
    verdicts = {c["key"]: c for c in json.loads((tmp_path / "summary.json").read_text())["claims"]}

    def for_lack_of_groups(c):  # a random model fails other preconditions too; here only the group sizes matter
        return c["verdict"] == "not testable" and ("not measured" in c["why"] or "50 or more" in c["why"])

    assert {k for k, c in verdicts.items() if for_lack_of_groups(c)} == untestable, {
        k: c["why"] for k, c in verdicts.items()
    }


def test_the_main_jobs_shared_setup_loads_once_and_measures_the_same(script_model, tmp_path, monkeypatch):
    """Inside shared_setup (the main job runs every script in one process) a second script on the same model reuses
    the loaded model, its prompts and its ranking, and writes the same claims as when it runs alone."""
    from gpt2_posheads.claims.record import read_summary
    from gpt2_posheads.cli import experiment
    from gpt2_posheads.commands import run

    loads = []
    real_load = experiment.load_model
    monkeypatch.setattr(experiment, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    argv = ["--model-dir", str(script_model), "--no-png", *GPT2_SCRIPTS["pos_embed_averaging"]]
    assert run("pos_embed_averaging", [*argv, "--out", str(tmp_path / "alone")]) == 0
    with experiment.shared_setup():
        assert (
            run(
                "rank_prev_heads",
                [
                    "--model-dir",
                    str(script_model),
                    "--no-png",
                    "--out",
                    str(tmp_path / "r"),
                    *GPT2_SCRIPTS["rank_prev_heads"],
                ],
            )
            == 0
        )
        assert run("pos_embed_averaging", [*argv, "--out", str(tmp_path / "shared")]) == 0
        assert len(experiment._SHARED["models"]) == 1 and len(experiment._SHARED["rankings"]) == 1
    assert experiment._SHARED is None and len(loads) == 2  # once alone, once in the block
    alone, shared = (read_summary(tmp_path / d / "summary.json") for d in ("alone", "shared"))
    assert [c.as_dict() for c in alone.claims] == [c.as_dict() for c in shared.claims]

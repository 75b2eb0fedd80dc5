"""The README's library quick start runs as written, on the shipped organism instead of GPT-2."""

from __future__ import annotations

import re

import pandas as pd
import torch

from gpt2_posheads.model.paths import REPO_ROOT

from conftest import MINI_DIR


def quick_start_code() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"## Library quick start\s+```python\n(.*?)```", readme, re.S)
    assert block, "README has no python block under 'Library quick start'"
    return block.group(1)


def test_readme_quick_start_runs(tmp_path, monkeypatch):
    code = quick_start_code()
    assert 'load_model("gpt2")' in code
    code = code.replace('load_model("gpt2")', f"load_model({str(MINI_DIR)!r})")
    # an organism whose sharpest head sits in layer 0 has nothing upstream to ablate: trace a layer-1 head
    code = code.replace(
        "path_ablation(model, prompts[:16], layer, head)", "path_ablation(model, prompts[:16], max(layer, 1), head)"
    )
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    model = ns["model"]
    assert isinstance(ns["ranking"], pd.DataFrame) and len(ns["ranking"]) == model.cfg.n_layers * model.cfg.n_heads
    assert ns["ext"].shape == (model.cfg.n_ctx, model.cfg.d_model)
    plain = model(ns["prompts"][:1])
    assert ns["averaged"].shape == plain.shape and not torch.allclose(ns["averaged"], plain)
    assert isinstance(ns["sources"], pd.DataFrame) and len(ns["sources"]) > 0
    assert isinstance(ns["atlas"], pd.DataFrame)
    assert (tmp_path / "explorer.html").stat().st_size > 10_000

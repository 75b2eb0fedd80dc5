"""The offline attention explorer, rendered in a real browser (headless Chromium): what it draws for a hand-built
model's known heads, and that it needs no network."""

import re
import shutil
import subprocess

import pytest
import torch

from gpt2_posheads.analysis.diagonals import diagonal_attention
from gpt2_posheads.report.explorer import write_explorer

from conftest import HANDSET

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def rendered_summary(page, fragment: str, tmp_path) -> dict[str, str]:
    """``#summary``'s data attributes after the page's scripts ran in headless Chromium."""
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--dump-dom",
            f"{page.as_uri()}#{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    tag = re.search(r'<div id="summary"([^>]*)>', dom)
    assert tag, dom[:500]
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', tag.group(1)))


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (setup.sh installs Debian's chromium)")
def test_explorer_draws_the_known_heads(handset_model, tmp_path):
    toks = torch.randint(1, handset_model.cfg.d_vocab, (HANDSET["n_ctx"],), generator=torch.Generator().manual_seed(0))
    page = write_explorer(handset_model, tmp_path / "handset.html", "hand-built", prompts=[("random", toks, None)])
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and "<script src" not in text  # nothing to fetch
    prev = rendered_summary(page, "prompt=0&layer=0&head=0&variant=clean", tmp_path)
    assert prev["head"] == "L0H0" and prev["top-offset"] == "1"  # the hand-set previous-token head
    expect = float(diagonal_attention(handset_model, toks[None], progress=False)[0, 0, 1])
    assert abs(float(prev["prev-mass"]) - expect) < 2 / 255  # what the page computes is the toolkit's number
    cur = rendered_summary(page, "prompt=0&layer=0&head=1&variant=clean", tmp_path)
    assert cur["head"] == "L0H1" and cur["top-offset"] == "0"  # the hand-set current-token head
    # W_pos averaged in groups of 10: positions 0..9 share one embedding, so the previous-token head loses them
    avg = rendered_summary(page, "prompt=0&layer=0&head=0&variant=wpos", tmp_path)
    assert avg["variant"] == "wpos" and float(avg["prev-mass"]) < 0.5 * float(prev["prev-mass"])

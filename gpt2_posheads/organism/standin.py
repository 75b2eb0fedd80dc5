"""A compiled stand-in for GPT-2 small, for testing the toolkit as a user with the hub runs it. It is not GPT-2.

Nothing offline is GPT-2 small, so the defaults the post's head names drive (``is_gpt2_small`` true: L4H11 as the
aggregator, the post's early heads, its per-head ratios) would run nowhere without a model that takes itself for GPT-2
small. This one, served as ``gpt2`` by the tests' hub (``tests/hubserver.py``), has GPT-2 small's shape, tokenizer and
``W_pos`` helix and the post's route placed **at the post's heads** (:data:`POST_PLACEMENT`). The entries
:func:`~gpt2_posheads.model.loading.is_gpt2_small` compares carry GPT-2's values, in coordinates no block holds
(:data:`RESERVED`), so the route is the generator's to the bit. Its card, its ``config.json`` (:data:`MARKER`) and
every summary measured on it say that it is a compiled stand-in; it is never shipped or offered as ``gpt2``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..model.loading import GPT2_W_E, GPT2_W_POS, STANDIN_KEY, gpt2_tokenizer
from ..model.paths import shared_file
from .generator import GPT2_SMALL, Generated, card_markdown, gpt2_small_route, write
from .weights import BOS

# The post's heads (004): the aggregator L4H11 and the six early heads it aggregates; GPT-2's L5H5 is an induction
# head. The counter has no counterpart in the post: it sits in the first free slot of layer 0.
POST_PLACEMENT = {
    "counter": "L0H0",
    "early_heads": ["L1H0", "L2H2", "L2H4", "L3H2", "L3H3", "L3H7"],
    "aggregator": "L4H11",
    "induction_head": "L5H5",
}
RESERVED = (3, 3)  # residual coordinates 0-2 and 765-767: the ones is_gpt2_small reads, in no block
SEED = 0
MARKER = "a compiled stand-in for testing gpt2_posheads online (GPT-2 small's shape, tokenizer and W_pos; not GPT-2)"
_GPT2_BOS = GPT2_SMALL["n_vocab"] - 1  # <|endoftext|>


def standin(seed: int = SEED) -> Generated:
    """The stand-in's weights and card (the same bytes for the same seed). The generator's BOS is id 0; GPT-2's is
    50256, so rows 0 and 50256 of ``W_E`` and ``W_U`` trade places (GPT-2's ``!`` gets the code the generator drew
    for id 50256), and the reserved coordinates then get GPT-2's values."""
    g = gpt2_small_route(seed, placement=POST_PLACEMENT, n_tokens=GPT2_SMALL["n_vocab"], reserved=RESERVED)
    m = g.model
    assert m.res.used <= m.res.d_model - RESERVED[1], "the blocks must leave the last reserved coordinates free"
    for w in (m.W_E, m.W_U):
        w[[BOS, _GPT2_BOS]] = w[[_GPT2_BOS, BOS]]
    for row, cols in GPT2_W_E.items():
        m.W_E[row, list(cols)] = list(cols.values())
    for row, cols in GPT2_W_POS.items():
        m.W_pos[row, list(cols)] = list(cols.values())
    g.model.name = "gpt2-standin"
    g.card.update(name="gpt2-standin", standin=MARKER, placement=POST_PLACEMENT, bos_token_id=_GPT2_BOS)
    return g


def card(g: Generated) -> str:
    """The card: its first line says what it is (a stand-in, not GPT-2), then the generator's card."""
    body = card_markdown(g).split("\n", 1)[1]
    return (
        f"# gpt2-standin: {MARKER}\n\n"
        "Built by `gpt2_posheads.organism.standin.write_standin` for the toolkit's tests, which serve it as `gpt2` "
        "from a hub-protocol server on 127.0.0.1 so that the defaults the post's head names drive run end to end. "
        "Every number measured on it describes this construction, never OpenAI's GPT-2 small. Its answers "
        "(`gpt2_posheads.organism.known_answers`, model `gpt2-standin`) were written down from the construction "
        "before anything was measured on it.\n" + body
    )


def write_standin(
    out: str | Path, vocab_file: str | Path | None = None, merges_file: str | Path | None = None, seed: int = SEED
) -> Path:
    """A Hugging Face GPT-2 folder of the stand-in with GPT-2's ids for BOS and EOS, the marker, its card, and GPT-2's
    tokenizer (``vocab_file``/``merges_file``, default: ``shared/gpt2-small``)."""
    vocab_file = Path(vocab_file) if vocab_file else shared_file("gpt2-small", "vocab.json")
    merges_file = Path(merges_file) if merges_file else shared_file("gpt2-small", "merges.txt")
    tok = gpt2_tokenizer(vocab_file, merges_file)  # a FileNotFoundError saying where the files are looked for
    g = standin(seed)
    config = {"bos_token_id": _GPT2_BOS, "eos_token_id": _GPT2_BOS, "n_ctx": GPT2_SMALL["n_ctx"], STANDIN_KEY: MARKER}
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        folder = write(g, Path(out), card(g), tokenizer_dir=Path(tmp), config=config)
    for src in (vocab_file, merges_file):
        shutil.copyfile(src, folder / src.name)
    return folder

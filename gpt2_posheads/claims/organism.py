"""A model organism's behaviour targets, judged: does it have the mechanism the GPT-2 post studies?

Each target is a rule declared here before anything is measured, and judged from the numbers alone (they are
measured by :func:`gpt2_posheads.posts.gpt2_prev_heads.organism_targets.measure_targets`). Whether the organism takes
the post's *route* is decided by the post's own route claims, not here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .gpt2_post import COPY_THRESHOLD, INDUCTION_RULE, SHARP_RATIO, SHARPEST_RULE
from .verdicts import Claim, at_least, at_most, declare_claim, predicate

# The reference language model: the same architecture and tokenizer trained on WikiText-2 alone for 1,600 steps
# (no synthetic phase), evaluated by :func:`~gpt2_posheads.posts.gpt2_prev_heads.organism_targets.heldout_loss` on
# the WikiText-2 held-out split (``split_docs(wikitext, 0.05, seed 0)``). An organism must model text at least as well
# as a plain LM of its size.
REFERENCE_HELDOUT = {"model": "a plain 4-layer LM, WikiText-2 alone, 1,600 steps", "loss": 4.29413}


def _copy_loss(v) -> tuple[bool, str]:
    first, second = v
    return second <= 1.0 and first >= 7.0, f"first copy {first:.2f} nats, second {second:.2f}"


def _heldout(v) -> tuple[bool, str]:
    loss, ref = v
    return loss <= ref + 5e-5, (
        f"held-out loss {loss:.4f} vs reference {ref:.4f} nats (perplexity {math.exp(loss):.1f} vs {math.exp(ref):.1f})"
    )


# The targets, declared before anything is measured (role "": they describe the model, they tell no route apart).
PREV_TEXT = declare_claim(
    "prev_text", "a sharp previous-token head on natural text", "GPT-2 L4H11: 0.01", SHARPEST_RULE, ""
)
PREV_RANDOM = declare_claim(
    "prev_random",
    "... and on random tokens",
    "GPT-2 L4H11: sharp everywhere",
    at_most(2 * SHARP_RATIO, "sharpest previous-token ratio on random tokens"),
    "",
)
INDUCTION = declare_claim("induction", "an induction head", "GPT-2: several (L5H1, L6H9, ...)", INDUCTION_RULE, "")
COPY_LOSS = declare_claim(
    "copy_loss",
    "it copies a repeated random sequence (after BOS)",
    "GPT-2: near-perfect second copy",
    predicate(
        "held if the loss on the second copy (its first token left out) is <= 1.0 nat and on the first >= 7 nats",
        _copy_loss,
    ),
    "",
)
COPIES = declare_claim(
    "copies",
    "it copies on the repeat-string prompt",
    "GPT-2: P(turtle) 0.99",
    at_least(COPY_THRESHOLD, "P(second word | first word) on the repeat-string prompt"),
    "",
)
HELDOUT = declare_claim(
    "heldout",
    "held-out loss no worse than the reference model",
    "-",
    predicate("held if the held-out loss is <= the reference model's", _heldout),
    "",
)
TARGETS = (PREV_TEXT, PREV_RANDOM, INDUCTION, COPY_LOSS, COPIES, HELDOUT)


@dataclass(frozen=True)
class Sharpest:
    """The sharpest previous-token head and its ratio (``head`` None: no previous-token head, ratio inf)."""

    head: str | None
    ratio: float

    def measured(self) -> dict:
        return {"head": self.head or "none", "ratio": self.ratio}

    def readout(self) -> str:
        return f"ratio {self.ratio:.3g}" if self.head else "no previous-token head"


@dataclass(frozen=True)
class Measured:
    """What the targets are judged on (losses in nats)."""

    prev_text: Sharpest  # on held-out text
    prev_random: Sharpest  # on random tokens
    induction_head: str
    induction_score: float  # on repeated random segments of seg_len
    seg_len: int
    copy_loss: tuple[float, float]  # on the first and second copy of BOS r r
    copy_loss_no_bos: tuple[float, float]  # ... of r r
    words: str  # the repeat-string prompt's target
    pair: str  # its words, P(second word | first word) = p_copy
    p_copy: float
    heldout_loss: float | None = None  # None: not measured

    def numbers(self) -> dict:  # the measurements as the report records them
        return {
            "prev_text": self.prev_text.measured(),
            "prev_random": self.prev_random.measured(),
            "induction": {"head": self.induction_head, "score": self.induction_score, "seg_len": self.seg_len},
            "copy_loss": dict(zip(("first", "second"), self.copy_loss)),
            "copy_loss_no_bos": dict(zip(("first", "second"), self.copy_loss_no_bos)),
            "copies": {"target": self.words, self.pair: self.p_copy},
        }


def judge_targets(m: Measured, reference_loss: float | None = REFERENCE_HELDOUT["loss"]) -> list[Claim]:
    """The targets judged on ``m`` (the held-out loss only where measured and with a reference)."""
    numbers = m.numbers()
    (first, second), (first_nb, second_nb) = m.copy_loss, m.copy_loss_no_bos
    claims = [
        *(
            spec.judge(numbers[spec.key], sharp.ratio, head=numbers[spec.key]["head"], readout=sharp.readout())
            for spec, sharp in ((PREV_TEXT, m.prev_text), (PREV_RANDOM, m.prev_random))
        ),
        INDUCTION.judge(
            numbers["induction"], m.induction_score, head=m.induction_head, readout=f"score {m.induction_score:.3g}"
        ),
        COPY_LOSS.judge(
            numbers["copy_loss"],
            (first, second),
            readout=f"{first:.3g} -> {second:.3g} nats (without BOS: {first_nb:.3g} -> {second_nb:.3g})",
        ),
        COPIES.judge(numbers["copies"], m.p_copy, readout=f"{m.pair} = {m.p_copy:.3g}"),
    ]
    if m.heldout_loss is not None and reference_loss is not None:
        claims.append(
            HELDOUT.judge(
                {"loss": m.heldout_loss, "reference": reference_loss},
                (m.heldout_loss, reference_loss),
                readout=f"{m.heldout_loss:.3f} nats (reference {reference_loss:.3f})",
            )
        )
    return claims

"""Sparse attention 3 (001): one attention layer is inefficient at retrieving the most similar
token. Perplexity converges near V/2 (n_embd 2, C 3); final perplexity vs C (3-8, at V 10, 20, 40) against
(C-2)/(C-1)*V; best perplexity vs n_embd; embeddings of numerically close tokens end up close. Then the posts'
proposed fix, never tested there: a distance kernel (-|q-k|^2) and a harmonic one (1/|q-k|^n), with n_embd 1
and 2. The comparisons (C, n_embd, kernels) are judged on 3 seeds per setting.

    gpt2-posheads toy_similar_content           # times: docs/posts/001-similar-content.md
    gpt2-posheads toy_similar_content --robustness  # + 720 grid runs: 27 min on one AVX2 core
    gpt2-posheads toy_similar_content --quick

The claim as a function: gpt2_posheads.posts.similar_content.similar_content
(gpt2_posheads/posts/similar_content/similarity.py).
"""

from gpt2_posheads.cli.toy import run_toy, toy_parser
from gpt2_posheads.posts.similar_content import similarity as claim


def main(argv=None):
    p = toy_parser(__doc__, steps=claim.STEPS, quick_steps=claim.QUICK_STEPS)
    args = p.parse_args(argv)
    run_toy(args, __file__, claim.similar_content)

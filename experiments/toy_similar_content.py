"""Sparse attention 3 (001): one attention layer is inefficient at retrieving the most similar

The command is built from the claim's declaration in ``gpt2_posheads.posts.similar_content.similarity``; in any
folder, once installed:
``gpt2-posheads toy_similar_content [options]`` or ``python -m gpt2_posheads toy_similar_content [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("toy_similar_content", sys.argv[1:]))

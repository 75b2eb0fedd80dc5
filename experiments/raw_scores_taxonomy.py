"""Raw attention scores: early previous-token heads suppress the current token, the aggregator boosts

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.taxonomy``; in any
folder, once installed:
``gpt2-posheads raw_scores_taxonomy [options]`` or ``python -m gpt2_posheads raw_scores_taxonomy [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("raw_scores_taxonomy", sys.argv[1:]))

"""Train the miniature GPT-2 model organism: previous-token heads and induction heads, offline.

The command lives in the package (``gpt2_posheads.commands.train_mini_gpt2``); in any folder, once installed:
``gpt2-posheads train_mini_gpt2 [options]`` or ``python -m gpt2_posheads train_mini_gpt2 [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("train_mini_gpt2", sys.argv[1:]))

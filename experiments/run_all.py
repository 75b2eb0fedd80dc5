"""The main job: every claim script of every post, then results/index.html (verdicts side by side per model) and an

The command lives in the package (``gpt2_posheads.commands.run_all``); in any folder, once installed:
``gpt2-posheads run_all [options]`` or ``python -m gpt2_posheads run_all [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("run_all", sys.argv[1:]))

"""Two results folders claim by claim: which numbers and verdicts moved between them.

The command lives in the package (``gpt2_posheads.commands.compare_results``); in any folder, once installed:
``gpt2-posheads compare_results [options]`` or ``python -m gpt2_posheads compare_results [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("compare_results", sys.argv[1:]))

"""Build the compiled GPT-2s: small models whose weights are set by hand to carry a known mechanism (the GPT-2 post's

The command lives in the package (``gpt2_posheads.commands.build_compiled_models``); in any folder, once installed:
``gpt2-posheads build_compiled_models [options]`` or ``python -m gpt2_posheads build_compiled_models [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("build_compiled_models", sys.argv[1:]))

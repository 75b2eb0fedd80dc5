"""The command-line layer: options and checks, output folders, the set-up of a model script, and running scripts
(``experiments/`` are thin scripts on top of it)."""

from .args import main_entry
from .experiment import corpus_prompts
from .output import Output

__all__ = ["Output", "corpus_prompts", "main_entry"]

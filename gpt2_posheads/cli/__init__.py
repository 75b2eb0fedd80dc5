"""The command-line layer: options and checks, output folders, the set-up of a model script, and running scripts
(``experiments/`` are thin scripts on top of it)."""

from ..model.validation import positive
from .args import main_entry
from .checks import check_device, check_hub_names
from .experiment import corpus_prompts, setup
from .output import Output, results_root, write_json

__all__ = [
    "Output",
    "check_device",
    "check_hub_names",
    "corpus_prompts",
    "main_entry",
    "positive",
    "results_root",
    "setup",
    "write_json",
]

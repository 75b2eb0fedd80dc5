"""The command-line layer: options and checks, the heads a script measures, output folders, the set-up of a
model script, and running scripts (``experiments/`` are thin scripts on top of it)."""

from ..model.validation import note, positive
from .args import (
    Parser,
    add_prompt_args,
    add_submatrix_args,
    experiment_parser,
    float_list,
    int_list,
    main_entry,
)
from .checks import CheckedArgs, ModelShape, check_device, check_hub_names, check_model_dir, postcheck, precheck
from .experiment import (
    Experiment,
    capped_seq_len,
    corpus_prompts,
    model_from_args,
    model_label,
    model_slug,
    open_output,
    setup,
)
from .heads import HeadDefault, HeadSpec, add_heads_arg, require_above_layer0, resolve_heads
from .output import Output, read_json, results_root, write_json

__all__ = [
    "CheckedArgs",
    "Experiment",
    "HeadDefault",
    "HeadSpec",
    "ModelShape",
    "Output",
    "Parser",
    "add_heads_arg",
    "add_prompt_args",
    "add_submatrix_args",
    "capped_seq_len",
    "check_device",
    "check_hub_names",
    "check_model_dir",
    "corpus_prompts",
    "experiment_parser",
    "float_list",
    "int_list",
    "main_entry",
    "model_from_args",
    "model_label",
    "model_slug",
    "note",
    "open_output",
    "positive",
    "postcheck",
    "precheck",
    "read_json",
    "require_above_layer0",
    "resolve_heads",
    "results_root",
    "setup",
    "write_json",
]

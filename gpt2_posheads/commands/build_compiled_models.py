"""Build the compiled GPT-2s: small models whose weights are set by hand to carry a known mechanism (the GPT-2 post's
route, and look-alikes with the same behaviour by other routes), the ground truth the verdicts are checked against.

    gpt2-posheads build_compiled_models                      # every model, into the models folder
    gpt2-posheads build_compiled_models --only route-gpt2 --out-dir /tmp/models

Deterministic: a rebuild writes the same bytes (weights, config, tokenizer), and says whether they changed. Each folder
is an ordinary Hugging Face GPT-2 folder with a card (README.md): which residual block holds what, which head reads and
writes what, the verdict every claim must get, and the numbers the toolkit measured on it (--no-measure skips them).
Each model is written to a staging folder and moved in when complete, under the lock a first-use build takes too (two
builds of one model never mix); a folder of that name that this script did not write is refused unless --force. The
models are described in gpt2_posheads/organism/compiled.py and docs/posts/004-gpt2-previous-token-heads.md.
"""

from pathlib import Path

from ..claims.catalogue import Command, Option
from ..cli.args import name_list
from ..cli.declared import parse
from ..cli.output import check_out_folder
from ..model.paths import folder_lock, models_dir, write_whole
from ..model.validation import UsageError
from ..organism.compiled import BUILDERS, build, weights_digest


def is_ours(folder: Path, name: str) -> bool:
    """A folder this script wrote: its card starts with the model's name."""
    card = folder / "README.md"
    return card.exists() and card.read_text(encoding="utf-8").startswith(f"# {name}:")


def build_all(names: list[str], out_dir: Path, measured: bool = True, force: bool = False) -> dict[str, str]:
    """Build ``names`` into ``out_dir/<name>``; returns ``{name: "written" | "unchanged" | "changed"}``."""
    for name in names:
        target = out_dir / name
        if target.exists() and not is_ours(target, name) and not force:
            problem, hint = (
                f"{target} exists and was not written by this script",
                "choose another --out-dir, or --force",
            )
            raise UsageError("--out-dir", problem, "a folder this script wrote, or none", hint + " to replace it")
    status = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        target = out_dir / name
        digests = []

        def make(staging: Path, name: str = name, digests: list = digests) -> None:
            digests.append(weights_digest(build(name, staging, measured=measured)))

        with folder_lock(target, f"the build of {name}"):
            try:
                before = weights_digest(target) if (target / "model.safetensors").exists() else None
            except OSError:  # a folder missing a file a build writes: rebuilt, and said changed
                before = ""
            write_whole(target, make)
        after = digests[0]
        status[name] = "written" if before is None else "unchanged" if before == after else "changed"
        print(f"{name}: {status[name]} ({target}, sha256 {after[:16]})", flush=True)
    return status


COMMAND = Command(
    "build_compiled_models",
    usage=__doc__,
    options=(
        Option("--only", None, f"comma-separated models (default all: {', '.join(BUILDERS)})"),
        Option(
            "--out-dir",
            None,
            "parent folder of the model folders (default: the models folder, data/ in a source checkout)",
        ),
        Option("--no-measure", False, "leave the measured numbers out of the cards (faster)"),
        Option("--force", False, "replace a folder of a model's name this script did not write"),
    ),
)


def main(argv=None):
    args = parse(COMMAND, argv)
    names = list(BUILDERS)
    if args.only is not None:
        names = name_list(args.only, "--only", BUILDERS, "model(s)", "unknown model(s) (none given)")
    out_dir = check_out_folder(args.out_dir or str(models_dir()), "--out-dir")
    build_all(names, out_dir, measured=not args.no_measure, force=args.force)
    return 0

"""Output folders that never lose or mix results.

A script's results go to one folder (``results/<script>/<model>/`` or ``--out``). Three rules keep what a
user has:

* **Only the toolkit's own files are replaced.** Every folder the toolkit writes holds a manifest
  (:data:`MANIFEST`) naming the files and sub-folders it wrote. A later run replaces exactly those; a
  folder holding anything else (a user's ``notes.csv``, a model's ``config.json``) is refused unless
  ``--force``, and even then nothing of the user's is replaced or deleted.
* **A run that fails changes nothing.** Files are written into a staging folder beside the target
  (``.<name>.partial-<pid>``) and moved into place only when the run succeeds; an error or Ctrl-C removes
  the staging folder and the lock, and the folders the run made that stayed empty, and leaves the earlier results
  as they were.
* **Two runs never mix.** A lock file (:data:`LOCK`) names the process writing the folder (its pid and start time,
  the machine); a second run refuses with one line naming it and the lock file. A lock whose process is gone, or whose
  pid now names another process (same machine), is taken over, and the staging folders such a run left (``kill -9``)
  are removed, each said in one line (:mod:`~gpt2_posheads.cli.locks`; :func:`remove_dead_runs` does the same for
  a whole results tree). A lock that cannot be checked (empty, not the toolkit's, another machine's) is refused
  with how to remove it.

* **Results first, then the console.** The claims table is printed once the files are in place, and the console can
  never cost a result (:class:`~gpt2_posheads.cli.console.ConsoleStream`): a reader that stops early (``script |
  head -2``) silences the rest of the run's output, a console that cannot show a character gets a replacement
  character. A folder that cannot be written (a full disk, a quota, a file-size limit, a read-only file system:
  :data:`~gpt2_posheads.model.paths.CANNOT_WRITE`) is one line naming it (:func:`write_failure`), with the earlier
  results as they were.

Sub-folders that must outlive a failed run (a toy sweep's resumable ``runs/``) are written in place
through :meth:`Output.persistent_dir`.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..claims.record import MANIFEST, jsonable, read_manifest, recorded_fingerprint, write_summary
from ..claims.verdicts import Claim, claims_table
from ..model.paths import cannot_write, holder_state, lock_holder, lock_record, remove_dead_staging, write_whole_text
from ..model.validation import UsageError, path_kind
from ..report.plotting import png_support, save_figure, write_png
from .locks import LOCK, lock_age, locked_error, now_iso, remove_dead_runs, say_dead  # noqa: F401 - and run_all's

_OPEN: list[Output] = []  # outputs of this process not yet committed (aborted by main_entry on failure)
_COMMITTED: list[Path] = []  # folders this process committed (where a later "no space left" is said to be)


# --- a folder that cannot be written ------------------------------------------------------------------------------


def _written_folders() -> tuple[Path, ...]:
    """The folders this process writes or wrote: its open outputs' targets and staging folders, those it committed."""
    return tuple(f for o in _OPEN for f in (o.target, o.out_dir)) + tuple(_COMMITTED)


def write_failure(e: BaseException, folder: Path | None = None, param: str = "--out") -> UsageError | None:
    """The one line for an error that says a file cannot be written (``ENOSPC``, ``EDQUOT``, ``EFBIG``, ``EROFS``;
    permission denied on a file this process writes: :func:`~gpt2_posheads.model.paths.cannot_write`), naming the
    folder being written (``folder``, else this process's open output, else the last one it committed, else the
    file's own folder) and that earlier results are kept; ``None`` for any other error."""
    why = cannot_write(e, _written_folders() + ((folder,) if folder is not None else ()))
    if why is None:
        return None
    if folder is None:
        folder = _OPEN[0].target if _OPEN else _COMMITTED[-1] if _COMMITTED else None
    if folder is None and getattr(e, "filename", None):
        folder = Path(os.fsdecode(e.filename)).parent
    where = str(folder) if folder is not None else "the output disk"
    kept = "results written before are kept as they were"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return UsageError(
            param,
            f"no space left on {where} ({why.split(': ')[-1]})",
            "a folder on a disk with free space",
            f"free some space or choose another --out; {kept}",
        )
    return UsageError(
        param,
        f"{where} cannot be written ({why})",
        "a folder this process can write",
        f"raise the limit (ulimit -f unlimited) or choose another --out; {kept}"
        if e.errno == errno.EFBIG
        else f"choose another --out; {kept}",
    )


# --- JSON -----------------------------------------------------------------------------------------------


def write_json(path: str | Path, obj) -> Path:
    """Write ``obj`` as JSON atomically (a temporary file renamed over the target)."""
    return write_whole_text(path, json.dumps(jsonable(obj), indent=2) + "\n")


# --- the lock and the manifest --------------------------------------------------------------------------------


def acquire_lock(folder: Path, script: str, param: str = "--out") -> Path:
    """Create ``folder/LOCK`` (:func:`~gpt2_posheads.model.paths.lock_record`: pid, its start time, machine, script) or
    refuse in one line naming the lock file and how to clear it where no live run of this machine can be shown to
    hold it (:func:`~gpt2_posheads.model.paths.holder_state`); a lock of a process of this machine that is gone, or
    whose pid now names another process, is taken over, and said."""
    lock = folder / LOCK
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = lock_holder(lock)
            if holder_state(holder) == "unreadable" and lock_age(lock) < 2:  # a run between creating it and writing it
                time.sleep(2)
                holder = lock_holder(lock)
            state = holder_state(holder)
            if not lock.exists():
                continue  # released meanwhile
            if state in ("dead", "reused"):
                lock.unlink(missing_ok=True)  # a stale lock from a killed run
                say_dead(lock, holder, state)
                continue
            raise locked_error(folder, lock, holder, state, param) from None
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(lock_record(script=script, started=now_iso()), f)
        except OSError as e:  # a full disk: an empty lock left behind would refuse every later run
            lock.unlink(missing_ok=True)
            raise (write_failure(e, folder, param) or e) from None
        return lock
    raise UsageError(param, f"could not lock {folder}", "a writable folder")


def foreign_entries(folder: Path, script: str | None = None) -> list[str]:
    """Names in ``folder`` that this script may not replace: not in its manifest (a manifest written by another
    script protects that script's files too), not the manifest or lock, not a staging folder, and not a
    sub-folder holding a manifest of its own (a nested toolkit output)."""
    if not folder.is_dir():
        return []
    m = read_manifest(folder)
    mine = script is None or m.get("script") in (None, script)
    ours = (set(m.get("files", [])) | set(m.get("folders", [])) if mine else set()) | {MANIFEST, LOCK}
    out = []
    for p in sorted(folder.iterdir()):
        if p.name in ours or (p.name.startswith(".") and ".partial-" in p.name):
            continue
        if p.is_dir() and (p / MANIFEST).exists():
            continue
        out.append(p.name)
    return out


def check_out_folder(path: str | Path, param: str = "--out") -> Path:
    """An output folder is a folder or does not exist yet, with folders above it: a file (or a device, a broken link)
    there or above is one line before anything runs. ``path``, expanded."""
    p = Path(path).expanduser()
    for q in (p, *p.parents):
        kind = path_kind(q)
        if kind == "missing":
            continue
        if kind != "folder":
            what = "a file" if kind == "file" else kind
            raise UsageError(
                param,
                f"{q} is {what}" + (f", so {p} cannot be made" if q != p else ""),
                "a folder (new, empty, or one the toolkit wrote)",
                f"choose another {param}",
            )
        break
    return p


def check_one_model_per_name(filed: dict, this: dict, param: str, where: str, hint: str) -> None:
    """Results are filed by a model's name (its folder's name, a hub id): ``this`` model (``{"label",
    "fingerprint"}``) is refused, in one line beginning with ``where``, where ``filed`` (the model whose results are
    there, or one given beside it) has other weights. The one check of every command that files results of a model:
    a results folder (:class:`Output`), the models of one command (head_atlas, run_all)."""
    theirs, ours = filed.get("fingerprint"), this.get("fingerprint")
    if theirs in (None, ours):
        return
    raise UsageError(
        param,
        f"{where} another model of the same name ({filed.get('label', '?')}, weights {theirs}; this one "
        f"{this.get('label', '?')}, weights {ours})",
        "one model per name: results are filed by the model's name",
        hint,
    )


# --- the output folder -----------------------------------------------------------------------------------


@dataclass
class Output:
    """One run's output folder: figures (HTML + PNG), CSV tables, ``summary.json``; staged, locked, manifested.

    ``out_dir`` is where this run writes (the staging folder); ``target`` is where the files land when
    :meth:`commit` succeeds. Use :meth:`open`; never construct directly.
    """

    target: Path
    out_dir: Path
    lock: Path
    script: str
    png: bool = True
    quick: bool = False
    written: list[Path] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    committed: bool = False
    foreign: frozenset[str] = frozenset()  # the user's files in the target (kept; never written over)
    context: dict = field(default_factory=dict)  # what every summary of this run records (model, prompts, ...)
    pngs: list = field(default_factory=list)  # (figure, stem, size) exported as PNG once the numbers are committed
    model: dict = field(default_factory=dict)  # the model the results are of (label, weights fingerprint)
    tables: list = field(default_factory=list)  # claims tables, printed once the results are in place
    made: list[Path] = field(default_factory=list)  # the folders Output.open made (deepest first)

    @classmethod
    def open(
        cls,
        target: str | Path,
        script: str,
        png: bool = True,
        quick: bool = False,
        force: bool = False,
        param: str = "--out",
        adopt: bool = False,
        model: dict | None = None,
    ) -> Output:
        """Check ``target``, lock it and make a staging folder beside it (see the module doc).

        ``adopt``: the user asked to replace what the folder holds (e.g. ``train_mini_gpt2.py --overwrite`` on a
        model folder): its files count as this run's to replace. ``model`` (``{"label", "fingerprint"}``): the model
        the results are of; a folder holding another model's results (another fingerprint under the same name) is
        refused unless ``force``, so two models never share a folder. Results of the same model folder measured on
        weights it no longer has are replaced, and said.
        """
        target = check_out_folder(target, param)
        made = [d for d in (target, *target.parents) if not d.exists()]  # removed again if they stay empty
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise write_failure(e, target, param) or UsageError(
                param, f"{target} cannot be created ({e.strerror})", "a writable folder"
            ) from None
        foreign, manifest = [] if adopt else foreign_entries(target, script), read_manifest(target)
        other = manifest.get("script")
        if other not in (None, script) and not force and not adopt:
            raise UsageError(
                param,
                f"{target} holds the results of {other}",
                "a folder of this script's own results",
                "choose another --out",
            )
        filed = {"label": (manifest.get("model") or {}).get("label"), "fingerprint": recorded_fingerprint(target)}
        if model and filed["label"] == model.get("label") and filed["fingerprint"] not in (None, model["fingerprint"]):
            was, now = filed["fingerprint"], model["fingerprint"]
            print(
                f"note: {target} holds results of {filed['label']} on weights {was}, now {now}: replaced",
                file=sys.stderr,
            )
        elif model and not force:
            hint = "pass --out to choose another folder (or rename the model folder), or --force to replace them"
            check_one_model_per_name(filed, model, param, f"{target} holds the results of", hint)
        if foreign and not force:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise UsageError(
                param,
                f"{target} holds files this toolkit did not write ({shown})",
                "a new or empty folder, or one the toolkit wrote",
                "choose another --out, or pass --force to write beside them (they are kept)",
            )
        if png:
            can, why = png_support()  # decided once, before any work, with a bounded wait
            if not can:
                print(f"note: figures are written as HTML only ({why})", file=sys.stderr)
                png = False
        for folder in (target, target.parent):  # the lock goes in the folder, the staging folder beside it
            if not os.access(folder, os.W_OK | os.X_OK):
                _remove_empty(made)
                raise UsageError(
                    param,
                    f"{folder} is not writable",
                    "a folder this user can write, in a writable parent",
                    "choose another --out",
                )
        try:
            lock = acquire_lock(target, script, param)
        except BaseException:
            _remove_empty(made)
            raise
        remove_dead_staging(target.parent, target.name)  # this run holds the lock: any other staging is a dead run's
        staging = target.parent / f".{target.name}.partial-{os.getpid()}"
        try:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
        except OSError as e:
            lock.unlink(missing_ok=True)
            _remove_empty(made)
            raise write_failure(e, target, param) or UsageError(
                param, f"{staging} cannot be created ({e.strerror})", "a writable parent folder"
            ) from None
        out = cls(target, staging, lock, script, png, quick, foreign=frozenset(foreign), model=model or {}, made=made)
        _OPEN.append(out)
        return out

    # --- writing ---
    def _not_yours(self, name: str, what: str) -> None:
        """Refuse to write ``name`` where the target holds a ``what`` of the user's of that name."""
        if name in self.foreign:
            raise UsageError(
                "--out",
                f"{self.target / name} belongs to you, not to this toolkit",
                f"a folder without {what} of that name",
                "choose another --out",
            )

    def path(self, name: str) -> Path:
        """A file of this run (in the staging folder), recorded as written."""
        self._not_yours(name, "a file")
        self.written.append(self.out_dir / name)
        return self.out_dir / name

    def persistent_dir(self, name: str) -> Path:
        """A sub-folder written in place (it survives a failed run: resumable work), recorded in the manifest."""
        self._not_yours(name, "an entry")
        d = self.target / name
        d.mkdir(parents=True, exist_ok=True)
        if name not in self.folders:
            self.folders.append(name)
        # recorded at once, so a run that fails after writing resumable work leaves a folder the next run may use
        m = read_manifest(self.target)
        if m.get("script") in (None, self.script) and name not in m.get("folders", []):
            folders = sorted(set(m.get("folders", [])) | {name})
            write_json(
                self.target / MANIFEST, {**m, "script": self.script, "files": m.get("files", []), "folders": folders}
            )
        return d

    def figure(self, fig, stem: str, **kw) -> None:
        """``stem.html`` now; ``stem.png`` after the run's numbers are committed (:meth:`commit`), so an interrupted
        or failed PNG export never costs a result."""
        for p in save_figure(fig, self.out_dir, stem, png=False, **kw):
            if p.parent == self.out_dir:
                self.path(p.name)
        if self.png:
            self.pngs.append((fig, stem, kw))

    def csv(self, df: pd.DataFrame, stem: str) -> None:
        df.to_csv(self.path(f"{stem}.csv"), index=False)

    def summary(self, obj: dict, claims: Sequence[Claim] = (), stem: str = "summary") -> Path:
        """Write ``summary.json`` (:func:`~gpt2_posheads.claims.record.write_summary`): ``obj`` plus ``claims``, their
        verdict counts, the figures, when it was measured and how long it took. The claims table is printed by
        :meth:`commit`, once the results are in place (a console that fails can then cost nothing)."""
        obj = dict(obj)
        obj.setdefault("script", self.script)
        obj.setdefault("quick", self.quick)
        obj.setdefault("elapsed_s", round(time.time() - self.started, 2))
        obj["finished_at"] = now_iso()
        obj["figures"] = [p.name for p in self.written if p.suffix in (".html", ".png")] + [
            f"{stem}.png" for _, stem, _ in self.pngs
        ]
        p = write_summary(self.path(f"{stem}.json"), obj, list(claims))
        if claims:
            self.tables.append(claims_table(list(claims)))
        return p

    # --- finishing ---
    def commit(self, quiet: bool = False) -> None:
        """Move this run's files into the target, replacing only what the previous manifest lists, write the
        new manifest and release the lock; then list what was written."""
        if self.committed:
            return
        old = read_manifest(self.target)
        if old.get("script") not in (None, self.script):
            old = {}  # another script's files stay (they were foreign to this run)
        pngs = [f"{stem}.png" for _, stem, _ in self.pngs if f"{stem}.png" not in self.foreign]
        names = sorted({p.name for p in self.written} | set(pngs))
        manifest = {
            "files": names,
            "folders": sorted(set(self.folders) | set(old.get("folders", []))),
            "script": self.script,
            "written_at": now_iso(),
            "quick": self.quick,
            **({"model": self.model} if self.model else {}),
        }
        # written beside the staged files first: a full disk fails here, before anything in the target is touched
        staged_manifest = write_json(self.out_dir / MANIFEST, manifest)
        for name in old.get("files", []):
            if name not in names or name in pngs:
                (self.target / name).unlink(missing_ok=True)  # the toolkit's own file: not written, or redrawn below
        for p in self.written:
            if p.exists():
                os.replace(p, self.target / p.name)
        os.replace(staged_manifest, self.target / MANIFEST)
        self.committed = True  # the numbers are in place: an interruption from here on keeps them
        _COMMITTED.append(self.target)
        self.written = [self.target / n for n in names]
        self.out_dir_staged, self.out_dir = self.out_dir, self.target
        try:
            for table in self.tables:  # printed once the results are in place
                print("\n" + table, flush=True)
            for fig, stem, kw in self.pngs:  # after the results: a slow or failing renderer costs only pictures
                if f"{stem}.png" in pngs:
                    write_png(fig, self.target / f"{stem}.png", kw.get("width", 1000), kw.get("height"))
        finally:
            self._close()
        if not quiet:
            print(f"\nwrote {len(names)} files to {self.target}:")
            for n in names:
                print(f"  {n}")

    def abort(self) -> None:
        """Drop this run's staged files; the target keeps what it had."""
        if not self.committed:
            self._close()

    def _close(self) -> None:
        staged = getattr(self, "out_dir_staged", self.out_dir)
        if staged != self.target:
            shutil.rmtree(staged, ignore_errors=True)
        self.lock.unlink(missing_ok=True)
        if not self.committed:  # an interrupted or failed first run leaves no empty results folder
            _remove_empty(self.made)
        if self in _OPEN:
            _OPEN.remove(self)


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove ``folders`` (deepest first) while each is empty: the folders a run made and left with nothing in them."""
    for d in folders:
        try:
            d.rmdir()
        except OSError:
            return


def abort_open_outputs() -> None:
    """Abort every output of this process that was not committed (on an error or Ctrl-C)."""
    for out in list(_OPEN):
        out.abort()


def finish_not_testable(reason: str) -> bool:
    """End every open output of a claim script with all its claims ``not testable`` and ``reason`` (a measurement
    the claims rest on could not be made: the model computed a NaN); whether there was such an output."""
    from ..claims.catalogue import script_claims
    from ..claims.gpt2_post import CLAIMS

    done = False
    for out in list(_OPEN):
        keys = script_claims().get(out.script)
        if not keys:
            continue
        claims = [CLAIMS[k].untested(reason, {"not_testable": reason}) for k in keys]
        out.summary({**out.context, "not_testable": reason}, claims)
        out.commit(quiet=True)
        done = True
    return done


RESULTS_ENV = "GPT2_POSHEADS_RESULTS"  # the results folder the main job (run_all --out) gives the scripts it runs


def results_root() -> Path:
    """Where every script writes unless told ``--out``: ``$GPT2_POSHEADS_RESULTS`` (set by ``run_all --out`` for the
    scripts it runs), else ``./results`` of the folder the user stands in."""
    return Path(os.environ.get(RESULTS_ENV) or Path.cwd() / "results")


def default_target(script: str, model_slug: str | None = None) -> Path:
    """``results/<script>/<model>/`` (or ``results/<script>/`` for a script without a model) under
    :func:`results_root`."""
    return results_root() / script / (model_slug or "")

"""Output folders that never lose or mix results: ``results/<script>/<model>/`` or ``--out``.

* **Only the toolkit's own files are replaced**: those its manifest names; anything else (a user's ``notes.csv``) is
  refused unless ``--force``, and even then kept.
* **A run that fails changes nothing.** Files are staged beside the target (``.<name>.partial-<pid>``) and moved in
  when the run succeeds; an error or Ctrl-C removes the staging folder, the lock and the folders the run made empty.
  Resumable work (a toy sweep's ``runs/``) is written in place.
* **Two runs never mix.** A lock (pid, its start time, machine) refuses a second run in one line; a lock whose process
  is gone (or whose pid names another process now) is taken over and its staging removed, said; one that cannot be
  checked (empty, not the toolkit's, another machine's) is refused with how to remove it.
* **Results first, then the console**, which can never cost a result; a folder that cannot be written is one line.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..claims.record import MANIFEST, jsonable, read_manifest, recorded_fingerprint, write_summary
from ..claims.verdicts import claims_table
from ..model import paths
from ..model.paths import STAGING, cannot_write, holder_state, lock_holder, lock_record, pid_alive
from ..model.validation import UsageError, path_kind
from ..report.plotting import png_support, save_figure, write_png

_OPEN: list[Output] = []  # outputs of this process not yet committed (aborted by main_entry on failure)
_COMMITTED: list[Path] = []  # folders this process committed (where a later "no space left" is said to be)
LOCK = ".gpt2_posheads.lock"
LOCK_TIMEOUT = 24 * 3600  # seconds after which another machine's lock is said to be probably left behind
RESULTS_ENV = "GPT2_POSHEADS_RESULTS"  # the results folder the main job (run_all --out) gives the scripts it runs


def write_failure(e: BaseException, folder: Path | None = None, param: str = "--out") -> UsageError | None:
    """The one line for an error that says a file cannot be written (:func:`~gpt2_posheads.model.paths.cannot_write`),
    naming the folder (``folder``, else the open output, the last committed, the file's own); else ``None``."""
    ours = [f for o in _OPEN for f in (o.target, o.out_dir)] + _COMMITTED + ([folder] if folder is not None else [])
    why = cannot_write(e, tuple(ours))
    if why is None:
        return None
    if folder is None:
        folder = _OPEN[0].target if _OPEN else _COMMITTED[-1] if _COMMITTED else None
    if folder is None and getattr(e, "filename", None):
        folder = Path(os.fsdecode(e.filename)).parent
    where = str(folder) if folder is not None else "the output disk"
    kept = "results written before are kept as they were"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        problem, allowed = f"no space left on {where} ({why.split(': ')[-1]})", "a folder on a disk with free space"
        return UsageError(param, problem, allowed, f"free some space or choose another --out; {kept}")
    ulimit = "raise the limit (ulimit -f unlimited) or " if e.errno == errno.EFBIG else ""
    hint = f"{ulimit}choose another --out; {kept}"
    return UsageError(param, f"{where} cannot be written ({why})", "a folder this process can write", hint)


def write_json(path: str | Path, obj) -> Path:
    """Write ``obj`` as JSON atomically (a temporary file renamed over the target)."""
    return paths.write_whole_text(path, json.dumps(jsonable(obj), indent=2) + "\n")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def _age(path: Path) -> float:
    """Seconds since ``path`` was last written (0 when it cannot be read)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def locked_error(folder: Path, lock: Path, holder: dict, state: str, param: str) -> UsageError:
    """The one line for ``folder`` locked by ``holder`` (``state``: ``live``, ``elsewhere`` or ``unreadable``)."""
    host = holder.get("host")
    who = f"{holder.get('script', '?')}, pid {holder.get('pid')} on {host}, started {holder.get('started', '?')}"
    one, clear = "one run per output folder", f"remove it (rm '{lock}')"
    if state == "live":
        hint = f"wait for it to finish, or choose another --out; its lock is {lock}"
        return UsageError(param, f"{folder} is being written by another run ({who})", one, hint)
    if state == "elsewhere":
        hours = _age(lock) / 3600
        old = f", {hours:.0f} h ago, probably left by a run that ended" if hours * 3600 > LOCK_TIMEOUT else ""
        problem = f"{folder} is locked by a run on another machine ({who}{old}), which cannot be checked from here"
        hint = f"if no run on {host} writes this folder, {clear}; or choose another --out"
        return UsageError(param, problem, one, hint)
    try:
        why = "it is empty" if not lock.read_text().strip() else "it is not a lock this toolkit writes"
    except (OSError, UnicodeDecodeError) as e:
        why = f"it cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})"
    problem = f"{lock} names no run of this toolkit ({why}), so no run can be shown to be writing {folder}"
    hint = f"if no run writes this folder, {clear}; or choose another --out"
    return UsageError(param, problem, f"{one}, with a lock the toolkit wrote", hint)


def _remove_if_dead(lock: Path, holder: dict) -> bool:
    """Remove ``lock`` when its holder's process is gone (or its pid names another process now), said; whether so."""
    state = holder_state(holder)
    if state not in ("dead", "reused"):
        return False
    lock.unlink(missing_ok=True)
    reused = f"; pid {holder.get('pid')} is now another process" if state == "reused" else ""
    run = f"{holder.get('script', '?')}, pid {holder.get('pid')}, started {holder.get('started', '?')}{reused}"
    print(f"note: removed {lock}, left by a run that ended without finishing ({run})", file=sys.stderr)
    return True


def remove_dead_runs(root: Path) -> int:
    """Remove under ``root`` what runs that ended without finishing (``kill -9``) left: locks of gone processes of
    this machine, their staging folders (unless another machine locks the folder) and ``.<name>.tmp-<pid>`` files,
    each said; the count removed (the main job's; a run does this for its own folder when it opens it)."""
    removed = 0
    for top, dirs, files in os.walk(root):
        here = Path(top)
        if LOCK in files:
            removed += _remove_if_dead(here / LOCK, lock_holder(here / LOCK))
        for name in files:
            m = re.fullmatch(r"\.(.+)\.tmp-(\d+)", name)
            if m and int(m[2]) != os.getpid() and not pid_alive(int(m[2])):
                (here / name).unlink(missing_ok=True)
                removed += 1
        staged = [d for d in dirs if STAGING.match(d)]
        dirs[:] = [d for d in dirs if d not in staged]  # a staging folder's own files are not walked
        for d in staged:
            name = STAGING.match(d)["name"]
            # a folder locked from another machine, whose processes cannot be asked from here, keeps its staging
            if holder_state(lock_holder(here / name / LOCK)) != "elsewhere":
                removed += len(paths.remove_dead_staging(here, name))
    return removed


def acquire_lock(folder: Path, script: str, param: str = "--out") -> Path:
    """Create ``folder/LOCK`` or refuse in one line (:func:`locked_error`); a dead run's lock is taken over."""
    lock = folder / LOCK
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = lock_holder(lock)
            if holder_state(holder) == "unreadable" and _age(lock) < 2:  # a run between creating it and writing it
                time.sleep(2)
                holder = lock_holder(lock)
            if not lock.exists() or _remove_if_dead(lock, holder):
                continue  # released meanwhile, or a stale lock from a killed run
            raise locked_error(folder, lock, holder, holder_state(holder), param) from None
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(lock_record(script=script, started=now_iso()), f)
        except OSError as e:  # a full disk: an empty lock left behind would refuse every later run
            lock.unlink(missing_ok=True)
            raise (write_failure(e, folder, param) or e) from None
        return lock
    raise UsageError(param, f"could not lock {folder}", "a writable folder")


def _foreign_entries(folder: Path, script: str) -> list[str]:
    """Names in ``folder`` this script may not replace: not in its manifest (or another script's), not the manifest,
    lock, a staging folder or a nested toolkit output."""
    m = read_manifest(folder)
    ours = {MANIFEST, LOCK, *(m.get("files", []) + m.get("folders", []) if m.get("script") in (None, script) else [])}
    return [
        p.name
        for p in sorted(folder.iterdir())
        if p.name not in ours
        and not (p.name.startswith(".") and ".partial-" in p.name)
        and not (p.is_dir() and (p / MANIFEST).exists())
    ]


def check_out_folder(path: str | Path, param: str = "--out") -> Path:
    """``path`` expanded, unless it or a path above it is not a folder (a file, a device, a broken link)."""
    p = Path(path).expanduser()
    q = next((q for q in (p, *p.parents) if path_kind(q) != "missing"), None)
    kind = path_kind(q) if q is not None else "folder"
    if kind != "folder":
        problem = f"{q} is {'a file' if kind == 'file' else kind}" + (f", so {p} cannot be made" if q != p else "")
        raise UsageError(param, problem, "a folder (new, empty, or one the toolkit wrote)", f"choose another {param}")
    return p


def check_one_model_per_name(filed: dict, this: dict, param: str, where: str, hint: str) -> None:
    """Results are filed by a model's name: ``this`` model (``{"label", "fingerprint"}``) is refused, in one line
    beginning with ``where``, where ``filed`` has other weights (a results folder, or the models of one command)."""
    theirs, ours = filed.get("fingerprint"), this.get("fingerprint")
    if theirs not in (None, ours):
        same = f"({filed.get('label', '?')}, weights {theirs}; this one {this.get('label', '?')}, weights {ours})"
        one = "one model per name: results are filed by the model's name"
        raise UsageError(param, f"{where} another model of the same name {same}", one, hint)


def _refuse(param: str, problem: str, allowed: str, hint: str = "choose another --out") -> UsageError:
    return UsageError(param, problem, allowed, hint)


@dataclass
class Output:
    """One run's output folder: written into ``out_dir`` (staging), moved to ``target`` by :meth:`commit`."""

    target: Path
    out_dir: Path
    lock: Path
    script: str
    png: bool = True
    quick: bool = False
    foreign: frozenset[str] = frozenset()  # the user's files in the target (kept; never written over)
    model: dict = field(default_factory=dict)  # the model the results are of (label, weights fingerprint)
    made: list[Path] = field(default_factory=list)  # the folders Output.open made (deepest first)
    written: list[Path] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    committed: bool = False
    context: dict = field(default_factory=dict)  # what every summary of this run records (model, prompts, ...)
    pngs: list = field(default_factory=list)  # (figure, stem, size) exported as PNG once the numbers are committed
    tables: list = field(default_factory=list)  # claims tables, printed once the results are in place

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
        """Check ``target``, lock it, stage beside it. ``adopt``: its files are this run's to replace (``--overwrite``).
        ``model`` (``{"label", "fingerprint"}``): another model's results of that name are refused unless ``force``;
        those of the same folder on weights it no longer has are replaced, and said."""
        target = check_out_folder(target, param)
        made = [d for d in (target, *target.parents) if not d.exists()]  # removed again if they stay empty
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            cannot = _refuse(param, f"{target} cannot be created ({e.strerror})", "a writable folder")
            raise write_failure(e, target, param) or cannot from None
        try:  # the folders it made are removed again if it is refused
            foreign, manifest = [] if adopt else _foreign_entries(target, script), read_manifest(target)
            other = manifest.get("script")
            if other not in (None, script) and not force and not adopt:
                raise _refuse(param, f"{target} holds the results of {other}", "a folder of this script's own results")
            filed = {"label": (manifest.get("model") or {}).get("label"), "fingerprint": recorded_fingerprint(target)}
            was, now = filed["fingerprint"], (model or {}).get("fingerprint")
            if model and filed["label"] == model.get("label") and was not in (None, now):
                note = f"note: {target} holds results of {filed['label']} on weights {was}, now {now}: replaced"
                print(note, file=sys.stderr)
            elif model and not force:
                hint = "pass --out to choose another folder (or rename the model folder), or --force to replace them"
                check_one_model_per_name(filed, model, param, f"{target} holds the results of", hint)
            if foreign and not force:
                shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                hint = "choose another --out, or pass --force to write beside them (they are kept)"
                problem = f"{target} holds files this toolkit did not write ({shown})"
                raise _refuse(param, problem, "a new or empty folder, or one the toolkit wrote", hint)
            if png:
                png, why = png_support()  # decided once, before any work, with a bounded wait
                if not png:
                    print(f"note: figures are written as HTML only ({why})", file=sys.stderr)
            for folder in (target, target.parent):  # the lock goes in the folder, the staging folder beside it
                if not os.access(folder, os.W_OK | os.X_OK):
                    allowed = "a folder this user can write, in a writable parent"
                    raise _refuse(param, f"{folder} is not writable", allowed)
            lock = acquire_lock(target, script, param)
            # this run holds the lock: other staging is a dead run's
            paths.remove_dead_staging(target.parent, target.name)
            staging = target.parent / f".{target.name}.partial-{os.getpid()}"
            try:
                shutil.rmtree(staging, ignore_errors=True)
                staging.mkdir()
            except OSError as e:
                lock.unlink(missing_ok=True)
                cannot = _refuse(param, f"{staging} cannot be created ({e.strerror})", "a writable parent folder")
                raise write_failure(e, target, param) or cannot from None
        except BaseException:
            _remove_empty(made)
            raise
        out = cls(target, staging, lock, script, png, quick, frozenset(foreign), model or {}, made)
        _OPEN.append(out)
        return out

    def _not_yours(self, name: str, what: str) -> None:
        """Refuse ``name`` where the target holds the user's ``what`` of that name."""
        if name in self.foreign:
            mine = f"{self.target / name} belongs to you, not to this toolkit"
            raise _refuse("--out", mine, f"a folder without {what} of that name")

    def path(self, name: str) -> Path:
        """A file of this run (in the staging folder), recorded as written."""
        self._not_yours(name, "a file")
        self.written.append(self.out_dir / name)
        return self.out_dir / name

    def persistent_dir(self, name: str) -> Path:
        """A sub-folder written in place (it survives a failed run: resumable work), recorded in the manifest at once,
        so a run that fails after writing resumable work leaves a folder the next run may use."""
        self._not_yours(name, "an entry")
        d = self.target / name
        d.mkdir(parents=True, exist_ok=True)
        if name not in self.folders:
            self.folders.append(name)
        m = read_manifest(self.target)
        if m.get("script") in (None, self.script) and name not in m.get("folders", []):
            m.update(script=self.script, files=m.get("files", []), folders=sorted({*m.get("folders", []), name}))
            write_json(self.target / MANIFEST, m)
        return d

    def figure(self, fig, stem: str, **kw) -> None:
        """``stem.html`` now; ``stem.png`` once the numbers are committed (a failed PNG export costs no result)."""
        for p in save_figure(fig, self.out_dir, stem, png=False, **kw):
            if p.parent == self.out_dir:
                self.path(p.name)
        if self.png:
            self.pngs.append((fig, stem, kw))

    def csv(self, df, stem: str) -> None:
        df.to_csv(self.path(f"{stem}.csv"), index=False)

    def summary(self, obj: dict, claims: Sequence = (), stem: str = "summary") -> Path:
        """Write ``summary.json`` (:func:`~gpt2_posheads.claims.record.write_summary`): ``obj``, ``claims``, the
        figures, when and how long; the claims table is printed by :meth:`commit`, once the results are in place."""
        obj = dict(obj)
        for key, value in (("script", self.script), ("quick", self.quick)):
            obj.setdefault(key, value)
        obj.setdefault("elapsed_s", round(time.time() - self.started, 2))
        obj["finished_at"] = now_iso()
        pngs = [f"{s}.png" for _, s, _ in self.pngs]
        obj["figures"] = [p.name for p in self.written if p.suffix in (".html", ".png")] + pngs
        p = write_summary(self.path(f"{stem}.json"), obj, list(claims))
        if claims:
            self.tables.append(claims_table(list(claims)))
        return p

    def commit(self, quiet: bool = False) -> None:
        """Move this run's files in (replacing only what the old manifest lists), write the manifest, unlock, list."""
        if self.committed:
            return
        old = read_manifest(self.target)
        if old.get("script") not in (None, self.script):
            old = {}  # another script's files stay (they were foreign to this run)
        pngs = [f"{stem}.png" for _, stem, _ in self.pngs if f"{stem}.png" not in self.foreign]
        names = sorted({p.name for p in self.written} | set(pngs))
        folders = sorted(set(self.folders) | set(old.get("folders", [])))
        manifest = dict(files=names, folders=folders, script=self.script, written_at=now_iso(), quick=self.quick)
        if self.model:
            manifest["model"] = self.model
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
        try:
            for table in self.tables:  # printed once the results are in place
                print("\n" + table, flush=True)
            for fig, stem, kw in self.pngs:  # after the results: a slow or failing renderer costs only pictures
                if f"{stem}.png" in pngs:
                    write_png(fig, self.target / f"{stem}.png", kw.get("width", 1000), kw.get("height"))
        finally:
            self._close()
            self.out_dir = self.target
        if not quiet:
            print(f"\nwrote {len(names)} files to {self.target}:" + "".join(f"\n  {n}" for n in names))

    def abort(self) -> None:
        """Drop this run's staged files; the target keeps what it had."""
        if not self.committed:
            self._close()

    def _close(self) -> None:
        if self.out_dir != self.target:
            shutil.rmtree(self.out_dir, ignore_errors=True)
        self.lock.unlink(missing_ok=True)
        if not self.committed:  # an interrupted or failed first run leaves no empty results folder
            _remove_empty(self.made)
        if self in _OPEN:
            _OPEN.remove(self)


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove ``folders`` (deepest first) while each is empty."""
    with contextlib.suppress(OSError):
        for d in folders:
            d.rmdir()


def abort_open_outputs() -> None:
    """Abort every output of this process that was not committed (on an error or Ctrl-C)."""
    for out in list(_OPEN):
        out.abort()


def finish_not_testable(reason: str) -> bool:
    """End every open output of a claim script with all its claims ``not testable`` for ``reason`` (the model
    computed a NaN); whether there was one."""
    from ..claims.catalogue import script_claims
    from ..claims.gpt2_post import CLAIMS

    ends = [(out, script_claims().get(out.script)) for out in _OPEN]
    for out, keys in [(out, keys) for out, keys in ends if keys]:
        claims = [CLAIMS[k].untested(reason, {"not_testable": reason}) for k in keys]
        out.summary({**out.context, "not_testable": reason}, claims)
        out.commit(quiet=True)
    return any(keys for _, keys in ends)


def results_root() -> Path:
    """Where every script writes unless told ``--out``: ``$GPT2_POSHEADS_RESULTS``, else ``./results``."""
    return Path(os.environ.get(RESULTS_ENV) or Path.cwd() / "results")


def default_target(script: str, model_slug: str | None = None) -> Path:
    """``results/<script>/<model>/`` (``<model>`` left out for a script without one) under :func:`results_root`."""
    return results_root() / script / (model_slug or "")

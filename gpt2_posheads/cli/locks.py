"""The lock of a results folder: one run writes a folder at a time, and a lock no live run of this machine holds is
named with how to clear it, or taken over when its process is gone (said in one line)."""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
import time
from pathlib import Path

from ..model.paths import STAGING, holder_state, lock_holder, pid_alive, remove_dead_staging
from ..model.validation import UsageError

LOCK = ".gpt2_posheads.lock"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


LOCK_TIMEOUT = 24 * 3600  # seconds after which another machine's lock is said to be probably left behind


def lock_age(path: Path) -> float:
    """Seconds since ``path`` was last written (0 when it cannot be read)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def locked_error(folder: Path, lock: Path, holder: dict, state: str, param: str) -> UsageError:
    """The one line for ``folder`` locked by ``holder`` (``state``: ``live``, ``elsewhere`` or ``unreadable``)."""
    who = f"{holder.get('script', '?')}, pid {holder.get('pid')} on {holder.get('host')}"
    who += f", started {holder.get('started', '?')}"
    clear = f"remove it (rm '{lock}')"
    if state == "live":
        return UsageError(
            param,
            f"{folder} is being written by another run ({who})",
            "one run per output folder",
            f"wait for it to finish, or choose another --out; its lock is {lock}",
        )
    if state == "elsewhere":
        hours = lock_age(lock) / 3600
        old = f", {hours:.0f} h ago, probably left by a run that ended" if hours * 3600 > LOCK_TIMEOUT else ""
        return UsageError(
            param,
            f"{folder} is locked by a run on another machine ({who}{old}), which cannot be checked from here",
            "one run per output folder",
            f"if no run on {holder.get('host')} writes this folder, {clear}; or choose another --out",
        )
    try:
        why = "it is empty" if not lock.read_text().strip() else "it is not a lock this toolkit writes"
    except (OSError, UnicodeDecodeError) as e:
        why = f"it cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})"
    return UsageError(
        param,
        f"{lock} names no run of this toolkit ({why}), so no run can be shown to be writing {folder}",
        "one run per output folder, with a lock the toolkit wrote",
        f"if no run writes this folder, {clear}; or choose another --out",
    )


def say_dead(lock: Path, holder: dict, state: str = "dead") -> None:
    reused = f"; pid {holder.get('pid')} is now another process" if state == "reused" else ""
    print(
        f"note: removed {lock}, left by a run that ended without finishing ({holder.get('script', '?')}, pid "
        f"{holder.get('pid')}, started {holder.get('started', '?')}{reused})",
        file=sys.stderr,
    )


def remove_dead_runs(root: Path) -> int:
    """Remove what runs that ended without finishing (``kill -9``, a power cut) left anywhere under ``root``: their
    locks (:data:`LOCK` naming a process of this machine that is gone), their staging folders
    (``.<name>.partial-<pid>`` whose process is gone, and whose folder no live run of another machine locks) and
    their temporary files (``.<name>.tmp-<pid>``); each said in one line. Nothing else is touched. The count
    removed. Called by the main job on its results folder, so that a job resumed after a kill leaves nothing behind
    (a run that writes one folder does this for that folder when it opens it)."""
    removed = 0
    for top, dirs, files in os.walk(root):
        here = Path(top)
        if LOCK in files:
            holder = lock_holder(here / LOCK)
            state = holder_state(holder)
            if state in ("dead", "reused"):
                (here / LOCK).unlink(missing_ok=True)
                say_dead(here / LOCK, holder, state)
                removed += 1
        for name in files:
            m = re.fullmatch(r"\.(.+)\.tmp-(\d+)", name)
            if m and int(m[2]) != os.getpid() and not pid_alive(int(m[2])):
                (here / name).unlink(missing_ok=True)
                removed += 1
        staged = [d for d in dirs if STAGING.match(d)]
        dirs[:] = [d for d in dirs if d not in staged]  # a staging folder's own files are not walked
        for d in staged:
            name = STAGING.match(d)["name"]
            if holder_state(lock_holder(here / name / LOCK)) == "elsewhere":
                continue  # its folder is locked from another machine, whose processes cannot be asked from here
            removed += len(remove_dead_staging(here, name))
    return removed

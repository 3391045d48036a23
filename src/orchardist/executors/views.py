"""The tree verify runs on: a fresh view of exactly what the patch holds, made once the agent
ended.

The agent's own working tree holds more than its patch: files git ignores (``__pycache__``,
generated modules, build folders) and files the snapshot leaves out. Tests run there can pass on
what will never merge (a planted ``.pyc`` compiled from correct code beside a broken source).
So verify, check and a judged stage's commands run in folders of their own, made by orchardist
once the agent's processes are gone: the tree of the attempt's start commit (an overlay of the
run's pristine checkout where the layout has one, two mounts) with the files that differ in the
patch written into it (:func:`~orchardist.git.indexfile.write_changes`: a cost that follows the
change),
else git's ``read-tree --reset -u`` of the patch. HEAD and the index say the start commit, as in
the agent's tree, so the change shows as modified files; home, tmp and io are new and empty.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

from ..confine.attemptpaths import AttemptPaths
from ..confine.layout import VIEWS, Layout
from ..errors import OrchardistError
from ..git.indexfile import IndexFile, write_changes
from ..git.repo import Repo
from ..pipelines.stages import JUDGED_STAGES
from ..state.agentrecords import Failure
from ..state.records import AttemptState
from . import AttemptJob, Outcome, Stacked
from .attempt import Attempt, Work

MAX_PARSED = 4  # parsed start indexes kept (one per pristine in use, about)
_parsed: dict[tuple[int, int, int, int], IndexFile] = {}
_lock = threading.Lock()


def needs_view(job: AttemptJob) -> bool:
    """Whether anything runs on the attempt's tree after its agent (else no view is made)."""
    return bool(job.verify or job.check or job.auto_verify or job.stage in JUDGED_STAGES)


def view_paths(layout: Layout, run_id: str, job_id: str) -> AttemptPaths:
    """Where the view of a run's job is made (not created)."""
    return AttemptPaths.under(layout.run_folder(run_id) / VIEWS / job_id)


def fresh_view(
    layout: Layout, a: Attempt, work: Work, on: Stacked | None, again: bool = False
) -> Attempt | Outcome:
    """The attempt with a fresh view of its patch's tree (``on``: the patch on the run's head;
    ``again``: made anew in place of the one it had); an Outcome when it cannot be made."""
    job = a.job
    assert isinstance(job, AttemptJob)
    view = view_paths(layout, job.run_id, job.id)  # removed with the attempt's folder
    try:
        if again:
            layout.remove(view)
        make_view(layout, view, job.start, work.patch if on is None else on.commit, job.run_id)
    except (OrchardistError, OSError) as exc:
        done = {"patch_commit": work.patch, "usage": work.usage}
        why = f"cannot make the tree verify runs on: {exc}"
        return a.end(AttemptState.FAILED, Failure.INFRA_ERROR, detail=why, **done)
    return replace(a, view=view, cwd=view.tree / job.workdir)


def make_view(
    layout: Layout, view: AttemptPaths, start: str, commit: str, run_id: str | None
) -> None:
    """Fresh folders at ``view`` whose tree is exactly ``commit``'s, HEAD and index ``start``'s.

    ``run_id`` lets the layout overlay the run's pristine checkout of ``start`` (already there:
    the attempt itself stands on it); without one, or where it cannot, a checkout of its own.
    """
    layout.create(view, start, run_id)
    if start == commit:
        return
    index = _start_index(view.checkout_index)
    objects = layout.repo.common_dir / "objects"  # the snapshot's new blobs are loose there
    if index is not None and write_changes(
        layout.repo, view.tree, index, start, commit, loose=objects
    ):
        return  # the view's own index is still the start's: only the files were written
    started = view.checkout_index.read_bytes()
    _reset(layout.repo, view, commit)
    index_file = view.git / "index"
    index_file.write_bytes(started)  # HEAD and index the start's, as in the agent's
    # Its entries' stat data are the start's files', and a file the reset wrote again matches
    # them (its freed inode reused, the same size, the same second): dated before every entry
    # (not 0, which turns git's check off), the index makes git compare contents (racy git),
    # so `git diff` in the view misses nothing
    os.utime(index_file, (1, 1))


def _start_index(path: Path) -> IndexFile | None:
    """The start's index, parsed once per index file (the overlaid views of one pristine all
    link its one file: parsing 30,000 entries again for each cost 150 ms), shared: only read;
    None where it is not a plain version 2 index."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)  # replaced whole, never rewritten
    with _lock:
        parsed = _parsed.get(key)
    if parsed is None:
        parsed = IndexFile.parse(path.read_bytes())
        if parsed is None:
            return None
        with _lock:
            _parsed[key] = parsed
            while len(_parsed) > MAX_PARSED:
                _parsed.pop(next(iter(_parsed)))  # the oldest
    return parsed


def _reset(repo: Repo, view: AttemptPaths, commit: str) -> None:
    """Make the view's tracked files ``commit``'s (what :func:`write_changes` does not do: links,
    mode changes, attributes, a file becoming a folder); files whose stat differs from the
    index are written again, so a stale stat can only cost time."""
    repo.git(
        f"--git-dir={view.git}",
        f"--work-tree={view.tree}",
        "-c",
        "core.splitIndex=false",
        "read-tree",
        "--reset",
        "-u",
        commit,
    )

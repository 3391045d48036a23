"""A run's attempt folders, found from the note the executor left in the state folder (the
workspace may be anywhere), counted and removed when the run is cleaned up or collected."""

from __future__ import annotations

from pathlib import Path


def recorded_run_folder(state_dir: Path, run_id: str) -> Path | None:
    """The folder a run's attempts were made in, as the executor recorded it."""
    try:
        text = (Path(state_dir) / "workdirs" / run_id).read_text().strip()
    except OSError:
        return None
    folder = Path(text)
    # Only ever a run folder of our layout: a damaged pointer must not name anything else.
    if not folder.is_absolute() or folder.name != run_id or folder.parent.name != "runs":
        return None
    return folder


def remove_run_folder(state_dir: Path, run_id: str) -> int:
    """Remove a run's attempt folders; returns how many attempts had one."""
    from ..confine.layout import LISTING, PRISTINE, VIEWS  # the sandbox's layout: not for status
    from ..safeio import remove_tree

    folder = recorded_run_folder(state_dir, run_id)
    if folder is None or not folder.is_dir():
        return 0
    count = sum(
        1
        for entry in folder.iterdir()
        if entry.name not in (LISTING, PRISTINE, VIEWS) and not _skeleton(entry)
    )
    remove_tree(folder)
    return count


def _skeleton(folder: Path) -> bool:
    """Whether ``folder`` is what an ended overlaid attempt leaves: an empty tree/ alone."""
    try:
        return [p.name for p in folder.iterdir()] == ["tree"] and not any(
            (folder / "tree").iterdir()
        )
    except OSError:
        return False


def forget_run(state_dir: Path, run_id: str) -> None:
    """Remove a run's attempt folders and the note of where they were."""
    remove_run_folder(state_dir, run_id)
    (Path(state_dir) / "workdirs" / run_id).unlink(missing_ok=True)

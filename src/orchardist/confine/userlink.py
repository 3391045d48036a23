"""The link to the user's git directory that the attempts' git directories read objects through.

Inside an attempt's namespace the repository's own path shows the attempt's tree, whose ``.git``
is a file: the real path of the user's objects is not there. So the attempts' alternates name
``<layout folder>/links/git/objects`` instead, where ``links/git`` is a symlink to the user's
git directory on the host (git resolves it), and inside the namespace an empty folder with the
user's git directory bound read-only at ``git`` (see isolation.RepoView: a bind onto the symlink
itself would follow it into the hidden checkout).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

FOLDER = "links"  # in a layout's folder, beside runs/ and baselines/
_lock = threading.Lock()


def path(layout_folder: Path) -> Path:
    """Where the link of a layout's repository is."""
    return Path(layout_folder) / FOLDER / "git"


def ensure(layout_folder: Path, common_dir: Path) -> Path:
    """The link, made (or made right) now; returns the objects folder as alternates name it."""
    link, target = path(layout_folder), Path(common_dir).resolve()
    with _lock:
        if not link.is_symlink() or os.readlink(link) != str(target):
            link.parent.mkdir(parents=True, exist_ok=True)
            fresh = link.with_name(f"git.{os.urandom(4).hex()}")
            fresh.symlink_to(target, target_is_directory=True)
            fresh.replace(link)  # atomic: a git reading the old link still finds objects
    return link / "objects"


def remove(layout_folder: Path) -> None:
    """Remove the link once no run or baseline folder is left that could name it."""
    folder = Path(layout_folder)
    if not (folder / "runs").exists() and not (folder / "baselines").exists():
        from ..safeio import remove_tree  # (validate imports this module and removes nothing)

        remove_tree(folder / FOLDER)

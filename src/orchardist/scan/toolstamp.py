"""Whether a scanner's tool may have changed since its ``version`` command last ran: a stamp of
the files that command's words name, so that a cached scan asks the version only when one moved.

A word is stamped when it names an executable (a path, or a name found on ``PATH``): the file
as named and as resolved (path, inode, size, modification time), the folder it is in, and any
``lib/python*/site-packages`` beside that folder. Upgrading a tool replaces its file, or its
entry script in that folder (``pip install -U ruff`` rewrites ``bin/ruff``), or its package in
site-packages (``python -m tool`` names only the interpreter): each changes the stamp. A
command none of whose words names a file has no stamp, and its version is asked every time.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path


def tool_stamp(command: str, search_path: str | None) -> str | None:
    """The stamp of what ``command`` runs, its names looked up on ``search_path``; None when
    no word of it names an executable."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    stamps: list[list[object]] = []
    for word in dict.fromkeys(words):
        found = _executable(word, search_path)
        if found is None:
            continue
        near = [found, found.resolve(), found.parent]
        near += sorted(found.parent.parent.glob("lib/python*/site-packages"))
        stamps += [_stat(path) for path in near]
    return json.dumps(stamps) if stamps else None


def _executable(word: str, search_path: str | None) -> Path | None:
    if word.startswith("-") or "=" in word:
        return None
    found = word if "/" in word else shutil.which(word, path=search_path)
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        return None
    return Path(os.path.abspath(found))


def _stat(path: Path) -> list[object]:
    try:
        st = path.stat()
    except OSError:
        return [str(path)]
    return [str(path), st.st_ino, st.st_size, st.st_mtime_ns]

"""Whether a scanner's tool may have changed since its ``version`` command last ran: a stamp of
the files that command's words name, so that a cached scan asks the version only when one moved.

A word is stamped when it names an executable (a path, or a name found on ``PATH``): the file
as named and as resolved (path, inode, size, modification time), the folder it is in, and any
``lib/python*/site-packages`` beside that folder. Upgrading a tool replaces its file, or its
entry script in that folder (``pip install -U ruff`` rewrites ``bin/ruff``), or its package in
site-packages (``python -m tool`` names only the interpreter): each changes the stamp. A
command none of whose words names a file has no stamp, and its version is asked every time.

Only :mod:`os` is imported: a scan answered from the cache (:mod:`.hit`) stamps the tool
again with :func:`words_stat`, before anything else is loaded.
"""

from __future__ import annotations

import os

from ..git.which import which

TYPE_CHECKING = False  # (see .hit: typing is not imported)
if TYPE_CHECKING:
    from collections.abc import Sequence


def tool_stamp(command: str, search_path: str | None) -> str | None:
    """The stamp of what ``command`` runs, its names looked up on ``search_path``; None when
    no word of it names an executable."""
    import shlex  # (a cached scan keeps the words instead)

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return words_stamp(words, search_path)


def words_stamp(words: Sequence[str], search_path: str | None) -> str | None:
    """:func:`tool_stamp` of a command already split into ``words``."""
    import json

    stamps = words_stat(words, search_path)
    return json.dumps(stamps) if stamps else None


def words_stat(words: Sequence[str], search_path: str | None) -> list[list[object]]:
    """What :func:`words_stamp` encodes: the stat of each file the words name or lead to."""
    stamps: list[list[object]] = []
    for word in dict.fromkeys(words):
        found = _executable(word, search_path)
        if found is None:
            continue
        folder = os.path.dirname(found)
        near = [found, os.path.realpath(found), folder, *_site_packages(os.path.dirname(folder))]
        stamps += [_stat(path) for path in near]
    return stamps


def _executable(word: str, search_path: str | None) -> str | None:
    if word.startswith("-") or "=" in word:
        return None
    found = which(word, search_path)
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        return None
    return os.path.abspath(found)


def _site_packages(prefix: str) -> list[str]:
    """``prefix/lib/python*/site-packages`` that exist, in order of their python* folder."""
    lib = os.path.join(prefix, "lib")
    try:
        with os.scandir(lib) as entries:
            names = sorted(e.name for e in entries if e.name.startswith("python") and e.is_dir())
    except OSError:
        return []
    found = [os.path.join(lib, name, "site-packages") for name in names]
    return [path for path in found if os.path.exists(path)]


def _stat(path: str) -> list[object]:
    try:
        st = os.stat(path)
    except OSError:
        return [path]
    return [path, st.st_ino, st.st_size, st.st_mtime_ns]

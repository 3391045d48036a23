"""A program found on ``PATH`` as :func:`shutil.which` finds it on POSIX, without importing
:mod:`shutil`, which imports the compression modules its archives use (bz2, lzma, zlib: ~5-6 M
of each read command's instructions, ``benchmarks/cli_start.py --instructions``). Only
:mod:`os` is imported: a scan answered from the cache (:mod:`..scan.hit`) stamps its tool with
it before anything else is loaded. git's own program is found with it (:data:`.env.GIT`), and
so are the agents', bwrap and a scanner's.
"""

from __future__ import annotations

import os


def which(program: str, path: str | None = None) -> str | None:
    """The file ``program`` names on ``path`` (default ``$PATH``), as :func:`shutil.which` finds
    it on POSIX: the first executable file of that name in the folders in order; a name with a
    ``/`` in it is checked as it stands; an empty ``path`` finds nothing."""
    if os.path.dirname(program):
        return program if _runnable(program) else None
    if path is None:
        path = os.environ.get("PATH")
        if path is None:
            path = os.confstr("CS_PATH") or os.defpath
    if not path:  # an empty PATH finds nothing (":" is the working folder)
        return None
    seen: set[str] = set()
    for folder in path.split(os.pathsep):
        if folder not in seen:
            seen.add(folder)
            found = os.path.join(folder, program)
            if _runnable(found):
                return found
    return None


def _runnable(file: str) -> bool:
    return os.path.exists(file) and os.access(file, os.F_OK | os.X_OK) and not os.path.isdir(file)

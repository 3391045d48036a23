"""Where an attempt's folders are: the root of orchardist's folders for a repository, and the
repository's own folder in it (the folders of one attempt beneath it: :mod:`.attemptpaths`, a
record ``validate``'s look at the repository's folder does not make).

``<root>`` is ``[run] workspace``, else ``$ORCHARDIST_WORKDIR_ROOT``, else
``${XDG_CACHE_HOME:-~/.cache}/orchardist``; each repository has a folder of its own in it,
named by :func:`repo_key`.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

ROOT_VAR = "ORCHARDIST_WORKDIR_ROOT"


def workdir_root(configured: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The root of orchardist's attempt folders (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if configured is not None:
        return Path(configured).expanduser().resolve()
    if env.get(ROOT_VAR):
        return Path(env[ROOT_VAR]).expanduser().resolve()
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return (Path(cache).expanduser() / "orchardist").resolve()


def repo_key(common_dir: Path) -> str:
    """A folder name for a repository: its name and a short hash of its git directory's path."""
    real = Path(common_dir).resolve()
    name = real.parent.name if real.name == ".git" else real.name.removesuffix(".git")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip(".-") or "repo"
    return f"{slug[:40]}-{hashlib.sha256(str(real).encode()).hexdigest()[:10]}"

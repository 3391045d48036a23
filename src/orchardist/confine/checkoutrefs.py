"""What names the user's checkout by absolute path, from the ``python`` that verify will run.

With namespaces each attempt's tree is shown at the repository's own path, so an editable
install of the project, a ``.pth`` file or ``PYTHONPATH`` naming a folder of the checkout read
the attempt's files. Where namespaces cannot be used (isolation off, or Landlock, which cannot
move paths) they read the user's checkout instead: verify and check then test the user's code,
not the agent's. ``run`` and ``doctor`` say so, listing what they found.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..safeio import read_capped
from .runenv import tracked_folders

TIMEOUT_S = 10.0
MAX_FILE_BYTES = 1 << 20
# site.getsitepackages() as verify's python sees them (site sets a venv's prefix, so no -S),
# without reading PYTHON* variables (-E)
_SITE_DIRS = (
    "import json, site; print(json.dumps([*site.getsitepackages(), site.getusersitepackages()]))"
)


@dataclass(frozen=True)
class Reference:
    """One thing that names the checkout: where it is, and the path inside the checkout."""

    where: str  # a file in site-packages, or the variable PYTHONPATH
    names: str  # the path it names, inside the checkout


def references(root: Path, env: Mapping[str, str] | None = None) -> list[Reference]:
    """Editable installs and ``.pth`` files in the site-packages of the ``python`` on PATH,
    and ``PYTHONPATH`` entries, that name ``root`` or a path inside it."""
    env = os.environ if env is None else env
    root = Path(root).resolve()
    found = [
        Reference("PYTHONPATH", entry)
        for entry in env.get("PYTHONPATH", "").split(os.pathsep)
        if entry and _inside(entry, root)
    ]
    for folder in _site_dirs(env):
        found += _in_site_dir(Path(folder), root)
    return list(dict.fromkeys(found))


def explain(root: Path, found: list[Reference]) -> str:
    """What a run without namespaces tests when ``found`` is not empty (empty: nothing)."""
    if not found:
        return ""
    lines = [
        f"warning: without namespaces, verify and check import your checkout {root}, not the "
        "attempt's tree: these name it by absolute path",
        *(f"  {ref.where} -> {ref.names}" for ref in found),
        "  A change an agent makes to that code is not what verify tests. Run with namespaces "
        '(install bubblewrap; [run] isolation = "auto" or "required"), or verify without the '
        "editable install (say, PYTHONPATH=src, or a non-editable install in a venv of its own).",
    ]
    return "\n".join(lines)


def unseen_path_entries(
    root: Path, environment: tuple[str, ...], env: Mapping[str, str] | None = None
) -> str:
    """With namespaces: the ``PATH`` folders inside the repository that no ``[run]
    environment`` folder shows (inside an attempt the repository's path is its tree, where an
    ignored ``.venv/bin`` is not), as a warning; "" when there are none."""
    env = os.environ if env is None else env
    root = Path(root).resolve()
    shown = [root / name for name in environment]
    unseen = [
        entry
        for entry in dict.fromkeys(env.get("PATH", "").split(os.pathsep))
        if entry
        and _inside(entry, root)
        and not any(Path(os.path.realpath(entry)).is_relative_to(s) for s in shown)
    ]
    unseen = [
        e for e in unseen if not tracked_folders([os.path.relpath(os.path.realpath(e), root)], root)
    ]
    if not unseen:
        return ""
    first = Path(os.path.realpath(unseen[0])).relative_to(root).parts[0]
    return (
        f"warning: PATH names {', '.join(unseen)}, inside the repository: attempts see their own "
        f'tree there, without it. Declare it, e.g. [run] environment = ["{first}"]'
    )


def _site_dirs(env: Mapping[str, str]) -> list[str]:
    """The site-packages folders of the ``python`` (else ``python3``) on ``env``'s PATH."""
    path = env.get("PATH", os.defpath)
    python = shutil.which("python", path=path) or shutil.which("python3", path=path)
    if python is None:
        return []
    try:
        done = subprocess.run(
            [python, "-E", "-c", _SITE_DIRS],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={"PATH": path},
            check=False,
        )
        folders = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return [f for f in folders if isinstance(f, str) and Path(f).is_dir()]


def _in_site_dir(folder: Path, root: Path) -> list[Reference]:
    """``.pth`` files and editable finders naming ``root``; editable ``direct_url.json``."""
    found = []
    candidates = [*folder.glob("*.pth"), *folder.glob("__editable__*finder.py")]
    for file in sorted(candidates):
        text = (read_capped(file, MAX_FILE_BYTES) or b"").decode(errors="replace")
        found += [Reference(str(file), p) for p in _paths_in(text, root)]
    for file in sorted(folder.glob("*.dist-info/direct_url.json")):
        url = _editable_url(read_capped(file, MAX_FILE_BYTES) or b"")
        if url is not None and _inside(url, root):
            found.append(Reference(str(file), url))
    return found


def _paths_in(text: str, root: Path) -> list[str]:
    """The absolute paths in ``text`` (a .pth line, a quoted string) inside ``root``."""
    pattern = re.escape(str(root)) + r"(?=[/\s'\"]|$)(?:/[^\s'\"]*)?"  # not root-other/
    found = [m.group(0).rstrip("/") or "/" for m in re.finditer(pattern, text)]
    return [p for p in dict.fromkeys(found) if _inside(p, root)]


def _editable_url(body: bytes) -> str | None:
    """The local path of an editable install's ``direct_url.json``, else None."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not (doc.get("dir_info") or {}).get("editable"):
        return None
    url = doc.get("url")
    if not isinstance(url, str) or not url.startswith("file://"):
        return None
    return unquote(urlparse(url).path)


def _inside(path: str, root: Path) -> bool:
    try:
        return Path(os.path.realpath(path)).is_relative_to(root)
    except (OSError, ValueError):
        return False

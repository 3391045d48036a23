"""Tools installed as npm and scripts install them, for the tests of confine/exes.py."""

from __future__ import annotations

import json
import stat
from pathlib import Path

BUGGY = "def add(a, b):\n    return a - b\n"
FIXER = "#!/bin/sh\nset -eu\nsed -i 's/a - b/a + b/' calc.py\n"  # fixes add() where it runs


def executable(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def npm_install(prefix: Path, name: str, script: str) -> Path:
    """A package ``name`` under ``prefix/node_modules`` with its ``.bin`` link, as npm makes
    them (``.bin/NAME -> ../NAME/bin/NAME.js``); returns the ``.bin`` folder."""
    executable(prefix / "node_modules" / name / "bin" / f"{name}.js", script)
    (prefix / "node_modules" / name / "package.json").write_text(json.dumps({"name": name}))
    bin_dir = prefix / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / name).symlink_to(f"../{name}/bin/{name}.js")
    return bin_dir

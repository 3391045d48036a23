"""A scan the cache answers whole, answered before the rest of orchardist is imported.

``orchardist scan`` of a commit it has scanned, with the same plan, tool and environment, has
nothing to run: its findings, already rendered, are in the cache. The full scan (``cli``)
leaves a memo of such a scan in the cache (:mod:`.memo`): the commit, everything its cache
keys were made of that a later scan could see changed, and its outputs rendered as a scan of
that commit answered from the cache renders them. :func:`answer` reads it back and checks it
with one git process (the repository, its store and the commit) and a few ``stat`` calls,
then logs the scan's events, marks its entries used and prints or writes the outputs, in the
same words and bytes as the full scan. Anything it does not recognise, on the command line or
in the memo, is the full scan's to do (None): never a different answer, only a slower one.

What a memo is keyed by: :func:`where_key` (the plan's path, the user's config file's
location, the ``--scanner`` and ``--base`` given); what it is checked against: this code
(:func:`code_stamp`), the plan's bytes, the repository, base and commit, the environment
variables the scanners' keys read, the stamps of their tools (:mod:`.toolstamp`), the config
files, and every cache entry it stands for (one that was evicted or forgotten makes it stale).
Only :mod:`os`, :mod:`marshal` (the memo's encoding) and :mod:`sqlite3` are imported (this
last where a memo is looked up: not for a line the full scan runs, ``--no-cache``), not
json or subprocess, whose imports alone took longer than the whole answer
(``tests/scan/test_scan_hit.py`` bounds them).
"""

from __future__ import annotations

import marshal
import os
import sys
import time

from ..git.fixed import FIXED_CONFIG
from .toolstamp import words_stat

TYPE_CHECKING = False  # typing is not imported: it takes longer than this whole answer
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Mapping, Sequence
    from typing import Any

MEMO_SCHEMA = 2  # bump when what a memo holds changes
DEFAULT_PLANS = ("orchardist.toml", "plan.toml")  # a scan's plan when none is named
LOOKUP_CHUNK = 500  # keys in one `in (...)` query, as state.scancache's
FAIL_LEVELS = ("error", "warning", "note")
FORMATS = ("sarif", "json", "table")
# the code whose behaviour a memo records: a change to any of these files makes it stale
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CODE = ("scan", "plan", "config.py", "specs.py", "errors.py", "state/store.py")
# orchardist's own git (git.env's git_env, whose module is not imported here; a test keeps
# them the same): no system or global configuration, nothing configured runs, output in C
_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_CONFIG_COUNT": str(len(FIXED_CONFIG)),
    **{f"GIT_CONFIG_KEY_{n}": key for n, (key, _) in enumerate(FIXED_CONFIG)},
    **{f"GIT_CONFIG_VALUE_{n}": value for n, (_, value) in enumerate(FIXED_CONFIG)},
}
_SUMMARY = (
    '{"scan":"%s","base":"%s","exit_code":%d,"output":%s,"findings":%d,"failed":[],'
    '"levels":%s,"scanners":%s,"results":%s}'
)


def answer(argv: Sequence[str]) -> int | None:
    """The exit code of ``orchardist scan ARGV`` when the cache answers it whole (the outputs
    printed or written); None when the full scan must run, having done nothing."""
    options = plain_options(argv)
    if options is None or options["no_cache"] or options["max_parallel"] is not None:
        return None
    try:
        found = _lookup(options)
    except KeyboardInterrupt:
        return 130  # errors.EXIT_INTERRUPTED, whose module is not imported here
    except Exception:  # a store, memo or git it cannot read: the full scan's to tell
        return None  # (nothing was committed: the transaction is rolled back with it)
    if found is None:
        return None
    memo, dirty = found
    try:
        return _output(options, memo, dirty)
    except BrokenPipeError:  # `orchardist scan | head`: the reader left; so do we, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


# -- the command line --------------------------------------------------------------------


def plain_options(argv: Sequence[str]) -> dict[str, Any] | None:
    """The options of a plain ``scan`` (plan, --scanner, -o, --format, --fail-on, --base,
    --max-parallel, --stats, --json, --no-cache), as ``scan.cli``'s parser would read them;
    None for anything else (--fix, --help, abbreviations, a value it would refuse): the
    command line's parser reads those, and says what is wrong."""
    out: dict[str, Any] = {"plan": None, "scanner": None, "output": None, "format": None}
    out.update({"fail_on": "error", "base": None, "stats": False, "json": False})
    out.update({"no_cache": False, "max_parallel": None})
    valued = {"--scanner": "scanner", "-o": "output", "--output": "output"}
    valued.update({"--format": "format", "--fail-on": "fail_on", "--base": "base"})
    valued["--max-parallel"] = "max_parallel"
    words = list(argv)
    while words:
        word = words.pop(0)
        name, eq, value = word.partition("=")
        if word in ("--stats", "--json", "--no-cache"):
            out[word[2:].replace("-", "_")] = True
        elif name in valued and name.startswith("--") and (eq or _value_next(words)):
            _set(out, valued[name], value if eq else words.pop(0))
        elif word == "-o" and _value_next(words):
            out["output"] = words.pop(0)
        elif word.startswith("-") or out["plan"] is not None:
            return None
        else:
            out["plan"] = word
    good = out["format"] in (None, *FORMATS) and out["fail_on"] in FAIL_LEVELS
    if out["max_parallel"] is not None:  # cli.options.positive's numbers, none of its errors
        given = out["max_parallel"]
        good = good and given.isascii() and given.isdigit() and int(given) > 0
        out["max_parallel"] = int(given) if good else None
    if out["output"] is not None:  # a name to put a temporary file beside
        good = good and os.path.basename(path_text(out["output"])) not in ("", "..")
    return out if good and out["base"] != "" else None


def _value_next(words: Sequence[str]) -> bool:
    """Whether the next word is an option's value as argparse reads it (``--base -x`` it
    refuses: the full command line says so)."""
    return bool(words) and not words[0].startswith("-")


def _set(out: dict[str, Any], key: str, value: str) -> None:
    if key == "scanner":
        out["scanner"] = [*(out["scanner"] or []), value]
    else:
        out[key] = value


def path_text(given: str) -> str:
    """``str(Path(given))``, without importing pathlib."""
    lead = "//" if given.startswith("//") and not given.startswith("///") else given[:1]
    lead = lead if lead.startswith("/") else ""
    parts = [p for p in given.split("/") if p not in ("", ".")]
    return lead + "/".join(parts) or "."


# -- the memo ----------------------------------------------------------------------------


def where_key(plan_path: str, scanners: Sequence[str] | None, base: str | None) -> str:
    """The key of the memo of a scan with the plan at ``plan_path`` (resolved) and these
    options, for this user (whose config file the plan's profiles are read from)."""
    home = os.environ.get("HOME"), os.environ.get("XDG_CONFIG_HOME")
    return "scan-memo " + repr((MEMO_SCHEMA, plan_path, *home, scanners, base))


def code_stamp() -> list[object]:
    """The stamp (inode, size, modification time) of the code that scans and reads plans."""
    stamps: list[object] = [sys.version]
    for name in _CODE:
        path = os.path.join(_PACKAGE, name)
        if name.endswith(".py"):
            stamps.append(file_stamp(path))
            continue
        with os.scandir(path) as entries:
            files = sorted(e.path for e in entries if e.name.endswith(".py"))
        stamps += [file_stamp(f) for f in files]
    return stamps


def file_stamp(path: str) -> list[object] | None:
    """A file's path, inode, size and modification time; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_ino, st.st_size, st.st_mtime_ns]


def _lookup(options: Mapping[str, Any]) -> tuple[dict[str, Any], _Child] | None:
    """The memo that answers this scan, its entries marked used and its events logged, and the
    running ``git status`` whose answer says whether to warn; None when there is none."""
    plan = options["plan"] or next((p for p in DEFAULT_PLANS if os.path.isfile(p)), None)
    if plan is None:
        return None
    plan_path = os.path.realpath(plan)
    with open(plan_path, "rb") as file:
        plan_bytes = file.read()
    key = where_key(plan_path, options["scanner"], options["base"])
    base = options["base"] or "HEAD"
    where = _rev_parse(os.path.dirname(plan_path), base)
    if where is None:
        return None
    root, common, commit = where
    store = os.path.join(common, "orchardist", "state.db")
    if not os.path.isfile(store):
        return None
    import sqlite3

    conn = sqlite3.connect(store, timeout=30.0, isolation_level=None)
    try:
        conn.execute("begin immediate")
        memo = _valid(conn, key, (MEMO_SCHEMA, code_stamp(), plan_bytes, root, base, commit))
        if memo is None:
            conn.execute("rollback")
            return None
        dirty = _Child(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"])
        _log(conn, memo)  # while git answers
        conn.execute("commit")
    finally:
        conn.close()
    return memo, dirty


def _rev_parse(folder: str, base: str) -> tuple[str, str, str] | None:
    """The work tree, git common folder and ``base``'s commit of the repository of ``folder``."""
    argv = ["git", "-C", folder, "rev-parse", "--path-format=absolute", "--show-toplevel"]
    argv += ["--git-common-dir", "--verify", "--quiet", f"{base}^{{commit}}"]
    code, out = _Child(argv).result()
    lines = out.splitlines()
    if code != 0 or len(lines) != 3:
        return None
    return os.path.realpath(lines[0]), lines[1], lines[2]


def _valid(conn: sqlite3.Connection, key: str, same: tuple[object, ...]) -> dict[str, Any] | None:
    """The memo under ``key``, if it is of this code, plan, repository, base and commit
    (``same``) and nothing it was made of has changed since, its cache entries marked used
    now; else None."""
    row = conn.execute("select value from scan_cache where key = ?", (key,)).fetchone()
    if row is None or not isinstance(row[0], bytes):
        return None
    memo: dict[str, Any] = marshal.loads(row[0])
    if memo["same"] != same:
        return None
    if any(os.environ.get(name) != value for name, value in memo["env"].items()):
        return None
    path = os.environ.get("PATH")
    if any(words_stat(words, path) != stamp for words, stamp in memo["stamps"]):
        return None
    if any(file_stamp(name) != stamp for name, stamp in memo["files"]):
        return None
    keys = list(dict.fromkeys([key, *memo["keys"]]))
    now = time.time()
    used = 0
    for start in range(0, len(keys), LOOKUP_CHUNK):
        chunk = keys[start : start + LOOKUP_CHUNK]
        marks = ", ".join("?" * len(chunk))
        sql = f"update scan_cache set used_at = ? where key in ({marks})"
        used += conn.execute(sql, (now, *chunk)).rowcount
    return memo if used == len(keys) else None


def _log(conn: sqlite3.Connection, memo: dict[str, Any]) -> None:
    """The scan's events, as the full scan logs them, under a new scan id (kept in ``memo``)."""
    scan_id = f"scan-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"
    memo["scan_id"] = scan_id
    now = time.time()
    conn.executemany(
        "insert into events (run_id, ts, kind, task_id, attempt, data) values (?,?,?,?,null,?)",
        [(scan_id, now, kind, task, data) for kind, task, data in memo["events"]],
    )


class _Child:
    """A git process, its stdout read whole: ``posix_spawn``, as subprocess would do it,
    without importing subprocess (it takes longer than git runs)."""

    def __init__(self, argv: list[str]) -> None:
        env = self.environment()
        self.fd, write = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, write, 1)]
            actions.append((os.POSIX_SPAWN_DUP2, null, 2))
            self.pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions)
        except OSError:
            os.close(self.fd)
            raise
        finally:
            os.close(write)
            os.close(null)

    @staticmethod
    def environment() -> dict[str, str]:
        """The user's environment without its ``GIT_*`` variables, and orchardist's git's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(_GIT_ENV)
        return env

    def result(self) -> tuple[int, str]:
        """Its exit code and its output."""
        chunks = []
        try:
            while chunk := os.read(self.fd, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(self.fd)
            _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


# -- the outputs -------------------------------------------------------------------------


def _output(options: Mapping[str, Any], memo: Mapping[str, Any], dirty: _Child) -> int:
    """Print and write what the full scan would have: warnings, the document, the summary."""
    code, out = dirty.result()
    sys.stderr.write(memo["ignored"])
    changes = len(out.splitlines()) if code == 0 else 0
    if changes:
        print(
            f"warning: your checkout has {changes} uncommitted change(s); scanning "
            f"{memo['same'][4]} as committed, without them",
            file=sys.stderr,
        )
    output = options["output"]
    fmt = options["format"] or ("sarif" if output is not None else "table")
    document = memo[fmt] if fmt != "json" else _findings_document(memo)
    if output is not None:
        try:
            write_whole(output, (document + "\n").encode("utf-8"))
        except OSError as exc:
            why = exc.strerror or exc
            print(f"error: cannot write {path_text(output)}: {why}", file=sys.stderr)
            return 2
    elif not options["json"]:
        print(document)
    code = 1 if memo["failing"][options["fail_on"]] else 0
    if options["json"]:
        print(_summary(memo, code, output))
    else:
        to = sys.stdout if output is not None or fmt == "table" else sys.stderr
        to.write(memo["summary"] + (memo["stats"] if options["stats"] else ""))
    return code


def _findings_document(memo: Mapping[str, Any]) -> str:
    """``--format json``: {"base": …, "findings": […]}, compact, as scan.sarif.render's."""
    return '{"base":"' + str(memo["same"][5]) + '","findings":' + str(memo["results"]) + "}"


def _summary(memo: Mapping[str, Any], code: int, output: str | None) -> str:
    """The ``--json`` document, compact, as scan.sarif.summary's."""
    shown = "null" if output is None else _json_text(path_text(output))
    return _SUMMARY % (
        memo["scan_id"],
        memo["same"][5],
        code,
        shown,
        memo["findings"],
        memo["levels"],
        memo["scanners"],
        memo["results"],
    )


def _json_text(text: str) -> str:
    """``json.dumps(text)``; json imported only for a text that needs escaping."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    import json

    return json.dumps(text)


def write_whole(path: str, data: bytes) -> None:
    """``safeio.write_whole``: a regular file (or none) replaced by a rename; anything else
    (a device, a FIFO) opened and written in place, never replaced."""
    import stat

    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with open(path, "wb") as out:
            out.write(data)
        return
    name = path_text(path)
    folder, base = os.path.split(name)
    tmp = os.path.join(folder, f".{base}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, name)
    except OSError:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise

"""``python -m orchardist``, and the ``orchardist`` command: the command line of :mod:`.cli`.

A plain ``orchardist scan`` that the cache answers whole (:mod:`.scan.hit`) is answered here,
before the command line's modules are imported: they take longer to load than that answer.
Any other plain scan (:func:`.scan.cli.plain_scan`), and a plain ``validate``, ``runs`` or
``status`` (:func:`.cli.plain.plain`), run without the command line's parser.

Those, and ``validate``, ``runs`` and ``--help`` read by the parser, end as soon as their
output is flushed (:func:`_end`), without the interpreter's teardown.
"""

import gc
import os
import sys

# Commands that read and end at once (None: the bare line, --help, --version). Everything their
# start-up allocates (modules, classes, a plan's records) lives until they exit, so the cyclic
# collector's passes over it find nothing to free: ~30 passes, 6-8 ms of validate's ~110 ms.
# The others, some of which run for hours, get the collector back once the command line's
# modules are in; a plain ``status`` line (no --watch: cli.plain) also reads and ends at once.
BRIEF = frozenset({"validate", "runs", None})


def main() -> int:
    """Entry point of the ``orchardist`` console script."""
    argv = sys.argv[1:]
    code = _brief(argv)
    if code is not None:
        return _end(code)
    from orchardist.cli import main as cli_main
    from orchardist.cli.parsing import command_in

    if command_in(argv) not in BRIEF:
        gc.enable()
        return cli_main(argv)
    try:
        code = cli_main(argv)
    except SystemExit as exc:  # --help, --version, a line the parser refuses: said and done
        if not isinstance(exc.code, int | None):
            raise
        code = exc.code or 0
    return _end(code)


def _brief(argv: list[str]) -> int | None:
    """The exit code of a plain scan, validate, runs or status line, run without the command
    line's parser; None, having done nothing, for any other line (the collector left off)."""
    if argv[:1] == ["scan"]:
        from orchardist.scan.hit import answer

        code = answer(argv[1:])
        if code is not None:
            return code
        gc.disable()  # while its modules load, as below; cmd_scan turns it back on
        from orchardist.scan.cli import plain_scan

        code = plain_scan(argv[1:])  # without the command line's parser: a plain scan's line
        if code is not None:
            return code
    gc.disable()
    from orchardist.cli.plain import plain

    return plain(argv)  # a plain validate, runs or status (no --watch): read and end at once


def _end(code: int) -> int:
    """End a command that has done its work: its output flushed, then ``os._exit(code)``,
    without the interpreter's teardown (freeing every module and object one by one: ~22 M
    instructions, a tenth of validate's). Its command closed its store: no -wal or -shm is
    left, as the teardown leaves none.

    Where the teardown has work, ``code`` is returned to end the ordinary way: a function
    registered with :mod:`atexit` (logging's, with ``-v``; a caller's), or a thread the
    interpreter would wait for. A reader that left (``orchardist runs | head -1``) is left
    quietly, as :func:`.errors.reported` leaves it mid-command."""
    import atexit

    threading = sys.modules.get("threading")  # (not imported for this: it is or it is not)
    waited = threading is not None and [
        t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
    ]
    if atexit._ncallbacks() or waited:
        return code
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # (None: started with that descriptor closed)
                stream.flush()
    except BrokenPipeError:
        pass  # what is left unwritten had no reader
    except (OSError, ValueError):  # a full disk, a closed stream: the interpreter says so
        return code
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())

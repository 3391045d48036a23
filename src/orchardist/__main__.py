"""``python -m orchardist``, and the ``orchardist`` command: the command line of :mod:`.cli`.

A plain ``orchardist scan`` that the cache answers whole (:mod:`.scan.hit`) is answered here,
before the command line's modules are imported: they take longer to load than that answer.
Any other plain scan (:func:`.scan.cli.plain_scan`), and a plain ``validate``, ``runs`` or
``status`` (:func:`.cli.plain.plain`), run without the command line's parser.
"""

import gc
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

    code = plain(argv)  # a plain validate, runs or status (no --watch): read and end at once
    if code is not None:
        return code
    from orchardist.cli import main as cli_main
    from orchardist.cli.parsing import command_in

    if command_in(argv) not in BRIEF:
        gc.enable()
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())

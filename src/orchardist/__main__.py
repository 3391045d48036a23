"""``python -m orchardist``, and the ``orchardist`` command: the command line of :mod:`.cli`.

A plain ``orchardist scan`` that the cache answers whole (:mod:`.scan.hit`) is answered here,
before the command line's modules are imported: they take longer to load than that answer.
"""

import sys


def main() -> int:
    """Entry point of the ``orchardist`` console script."""
    argv = sys.argv[1:]
    if argv[:1] == ["scan"]:
        from orchardist.scan.hit import answer

        code = answer(argv[1:])
        if code is not None:
            return code
    from orchardist.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())

"""A stand-in for a coding agent: it writes this example's canned work for each task.

orchardist runs it as ``python agent.py TASK ATTEMPT`` (see ``plan.toml``), with the current
directory set to this folder inside the task's own git worktree. Like a real agent it edits files
and exits 0; it does not commit, and it does not decide whether the task is done: the task's
verify commands do. Swap the profile's command for a real coding agent to do real work.

One task is deliberately wrong on its first attempt (``stats`` divides with ``//``), so the run
shows a failed verification, the feedback reaching the next attempt's prompt, and a retry.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path


def write(path: str, text: str) -> None:
    """Create or replace a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    print(f"agent: wrote {path}")


def edit(path: str, old: str, new: str) -> None:
    """Replace the first ``old`` in a file; give up (exit 1) when the file does not have it."""
    text = Path(path).read_text(encoding="utf-8")
    if old not in text:
        sys.exit(f"agent: {path} does not contain {old!r}; giving up")
    Path(path).write_text(text.replace(old, new, 1), encoding="utf-8")
    print(f"agent: edited {path}")


def append(path: str, text: str) -> None:
    """Add text at the end of a file."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text))
    print(f"agent: appended to {path}")


# -- one function per task -------------------------------------------------------------------


def tokens(attempt: int) -> None:
    """Words become Unicode-aware and keep inner apostrophes."""
    edit(
        "textkit/words.py",
        '_WORD = re.compile(r"[A-Za-z0-9]+")',
        '_WORD = re.compile(r"[^\\W_]+(?:[\'\\u2019][^\\W_]+)*")',
    )
    edit(
        "textkit/words.py",
        "runs of ASCII letters and digits.",
        "letters and digits of any script, inner apostrophes kept.",
    )
    append(
        "tests/test_words.py",
        """

        def test_words_keeps_accents_and_apostrophes() -> None:
            assert words("Crème brûlée isn't café-au-lait") == [
                "Crème",
                "brûlée",
                "isn't",
                "café",
                "au",
                "lait",
            ]


        def test_underscores_separate_words() -> None:
            assert words("snake_case_name") == ["snake", "case", "name"]
        """,
    )


def slugify(attempt: int) -> None:
    """A new module, and its tests."""
    write(
        "textkit/slug.py",
        '''
        """URL slugs."""

        from __future__ import annotations

        import unicodedata

        from .words import words


        def slugify(text: str, separator: str = "-") -> str:
            """A URL-safe slug: ASCII, lower case, words joined by ``separator``."""
            ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
            return separator.join(w.lower() for w in words(ascii_text.replace("'", "")))
        ''',
    )
    write(
        "tests/test_slug.py",
        """
        from textkit.slug import slugify


        def test_slugify_lowercases_and_joins_words() -> None:
            assert slugify("Hello, World!") == "hello-world"


        def test_slugify_drops_accents_and_apostrophes() -> None:
            assert slugify("Crème brûlée") == "creme-brulee"
            assert slugify("Don't panic") == "dont-panic"


        def test_slugify_separator_and_empty_text() -> None:
            assert slugify("a b c", separator="_") == "a_b_c"
            assert slugify(" -- ") == ""
        """,
    )


def case(attempt: int) -> None:
    """snake_case, kebab-case and camelCase."""
    write(
        "textkit/case.py",
        r'''
        """Identifier cases: snake_case, kebab-case, camelCase."""

        from __future__ import annotations

        import re

        from .words import words

        # Split "parseJSONData" into parse / JSON / Data.
        _HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


        def _parts(text: str) -> list[str]:
            return [part.lower() for word in words(text) for part in _HUMP.split(word) if part]


        def snake_case(text: str) -> str:
            """``"HTTP server error"`` → ``"http_server_error"``."""
            return "_".join(_parts(text))


        def kebab_case(text: str) -> str:
            """``"parseJSONData"`` → ``"parse-json-data"``."""
            return "-".join(_parts(text))


        def camel_case(text: str) -> str:
            """``"hello big world"`` → ``"helloBigWorld"``."""
            parts = _parts(text)
            return parts[0] + "".join(p.capitalize() for p in parts[1:]) if parts else ""
        ''',
    )
    write(
        "tests/test_case.py",
        """
        from textkit.case import camel_case, kebab_case, snake_case


        def test_snake_case() -> None:
            assert snake_case("HTTPServer error") == "http_server_error"
            assert snake_case("already_snake") == "already_snake"


        def test_kebab_case_splits_humps() -> None:
            assert kebab_case("parseJSONData") == "parse-json-data"


        def test_camel_case() -> None:
            assert camel_case("hello big world") == "helloBigWorld"
            assert camel_case("") == ""
        """,
    )


def stats(attempt: int) -> None:
    """Text statistics; the first attempt has a bug that verification catches."""
    if attempt == 1:
        print("agent: first draft (it has a bug: the average uses floor division)")
        average = "total // len(found)"
    else:
        if "An earlier attempt failed" in os.environ.get("ORCHARDIST_PROMPT", ""):
            print("agent: the prompt carries the failed test output; fixing the division")
        average = "total / len(found)"
    write(
        "textkit/stats.py",
        f'''
        """Counting words, sentences and reading time."""

        from __future__ import annotations

        import math
        import re
        from dataclasses import dataclass

        from .words import words

        _SENTENCE_END = re.compile(r"[.!?]+")


        @dataclass(frozen=True)
        class TextStats:
            """A summary of a text."""

            words: int
            sentences: int
            average_word_length: float
            reading_time_s: int


        def average_word_length(text: str) -> float:
            """Mean length of the words of ``text`` (0.0 for no words)."""
            found = words(text)
            if not found:
                return 0.0
            total = sum(len(w) for w in found)
            return {average}


        def sentence_count(text: str) -> int:
            """Sentences: stretches ended by ``.``, ``!`` or ``?`` (or the end) that have words."""
            return sum(1 for chunk in _SENTENCE_END.split(text) if words(chunk))


        def reading_time_s(text: str, words_per_minute: int = 200) -> int:
            """Seconds to read ``text``, rounded up."""
            return math.ceil(len(words(text)) * 60 / words_per_minute)


        def stats(text: str) -> TextStats:
            """All of the above at once."""
            return TextStats(
                words=len(words(text)),
                sentences=sentence_count(text),
                average_word_length=average_word_length(text),
                reading_time_s=reading_time_s(text),
            )
        ''',
    )
    write(
        "tests/test_stats.py",
        """
        from textkit.stats import (
            TextStats,
            average_word_length,
            reading_time_s,
            sentence_count,
            stats,
        )


        def test_average_word_length() -> None:
            assert average_word_length("ab cde") == 2.5
            assert average_word_length("") == 0.0


        def test_sentence_count() -> None:
            assert sentence_count("Hi. How are you?! Fine") == 3
            assert sentence_count("...") == 0


        def test_reading_time_rounds_up() -> None:
            assert reading_time_s("word " * 201) == 61
            assert reading_time_s("") == 0


        def test_stats() -> None:
            assert stats("One two. Three!") == TextStats(
                words=3, sentences=2, average_word_length=11 / 3, reading_time_s=1
            )
        """,
    )


def wrap(attempt: int) -> None:
    """Line wrapping (independent of the other tasks)."""
    write(
        "textkit/wrap.py",
        '''
        """Wrapping text into lines."""

        from __future__ import annotations


        def wrap(text: str, width: int = 72) -> list[str]:
            """Greedy wrapping at spaces; a word longer than ``width`` gets a line of its own."""
            if width < 1:
                raise ValueError("width must be at least 1")
            lines: list[str] = []
            line = ""
            for word in text.split():
                if line and len(line) + 1 + len(word) > width:
                    lines.append(line)
                    line = word
                else:
                    line = f"{line} {word}" if line else word
            if line:
                lines.append(line)
            return lines


        def fill(text: str, width: int = 72) -> str:
            """``wrap``, joined with newlines."""
            return "\\n".join(wrap(text, width))
        ''',
    )
    write(
        "tests/test_wrap.py",
        """
        import pytest

        from textkit.wrap import fill, wrap


        def test_wrap_fills_lines_greedily() -> None:
            lines = wrap("the quick brown fox jumps", width=10)
            assert lines == ["the quick", "brown fox", "jumps"]


        def test_long_words_get_their_own_line() -> None:
            assert wrap("a extraordinarily b", width=5) == ["a", "extraordinarily", "b"]


        def test_fill_and_bad_width() -> None:
            assert fill("a b c", width=3) == "a b\\nc"
            with pytest.raises(ValueError):
                wrap("x", width=0)
        """,
    )


def exports(attempt: int) -> None:
    """The package's public API, once every module exists (keeps the current version)."""
    found = re.search(r'__version__ = "([^"]+)"', Path("textkit/__init__.py").read_text())
    version = found.group(1) if found else "0.1.0"
    write(
        "textkit/__init__.py",
        f'''
        """textkit: small, dependable text utilities (the orchardist quickstart project)."""

        from .case import camel_case, kebab_case, snake_case
        from .slug import slugify
        from .stats import TextStats, average_word_length, reading_time_s, sentence_count, stats
        from .words import word_count, words
        from .wrap import fill, wrap

        __version__ = "{version}"

        __all__ = [
            "TextStats",
            "__version__",
            "average_word_length",
            "camel_case",
            "fill",
            "kebab_case",
            "reading_time_s",
            "sentence_count",
            "slugify",
            "snake_case",
            "stats",
            "word_count",
            "words",
            "wrap",
        ]
        ''',
    )
    write(
        "tests/test_api.py",
        """
        import textkit


        def test_every_exported_name_exists() -> None:
            for name in textkit.__all__:
                assert hasattr(textkit, name), name


        def test_the_pieces_work_together() -> None:
            title = "Crème Brûlée: A Guide"
            assert textkit.slugify(title) == "creme-brulee-a-guide"
            assert textkit.snake_case(title) == "crème_brûlée_a_guide"
            assert textkit.stats(title).words == 4
            assert textkit.wrap(title, width=13) == ["Crème Brûlée:", "A Guide"]
        """,
    )


def cli(attempt: int) -> None:
    """A command line: ``python -m textkit slug "Hello World"``."""
    write(
        "textkit/cli.py",
        '''
        """``python -m textkit COMMAND TEXT...``: the functions of textkit on the command line."""

        from __future__ import annotations

        import argparse
        import sys
        from collections.abc import Callable, Sequence

        import textkit

        COMMANDS: dict[str, Callable[[str], object]] = {
            "slug": textkit.slugify,
            "snake": textkit.snake_case,
            "kebab": textkit.kebab_case,
            "camel": textkit.camel_case,
            "count": textkit.word_count,
            "reading-time": textkit.reading_time_s,
        }


        def main(argv: Sequence[str] | None = None) -> int:
            """Run one command on the text given as arguments (or on standard input)."""
            parser = argparse.ArgumentParser(prog="textkit")
            parser.add_argument("--version", action="version", version=textkit.__version__)
            parser.add_argument("command", choices=[*COMMANDS, "wrap"])
            parser.add_argument("text", nargs="*", help="the text (default: standard input)")
            parser.add_argument("--width", type=int, default=72, help="for wrap")
            args = parser.parse_intermixed_args(argv)
            text = " ".join(args.text) if args.text else sys.stdin.read()
            if args.command == "wrap":
                print(textkit.fill(text, args.width))
            else:
                print(COMMANDS[args.command](text))
            return 0
        ''',
    )
    write(
        "textkit/__main__.py",
        """
        from .cli import main

        raise SystemExit(main())
        """,
    )
    write(
        "tests/test_cli.py",
        """
        import pytest

        from textkit.cli import main


        def test_slug_command(capsys: pytest.CaptureFixture[str]) -> None:
            assert main(["slug", "Hello,", "World!"]) == 0
            assert capsys.readouterr().out == "hello-world\\n"


        def test_wrap_command(capsys: pytest.CaptureFixture[str]) -> None:
            assert main(["wrap", "--width", "9", "the quick brown fox"]) == 0
            assert capsys.readouterr().out == "the quick\\nbrown fox\\n"


        def test_unknown_command_is_a_usage_error() -> None:
            with pytest.raises(SystemExit) as exc:
                main(["shout", "hi"])
            assert exc.value.code == 2
        """,
    )


def readme(attempt: int) -> None:
    """Docs whose examples are tests."""
    write(
        "README.md",
        """
        # textkit

        Small, dependable text utilities. Every example below is run by the test suite
        (`tests/test_readme.py`).

        ```python
        >>> from textkit import slugify, snake_case, camel_case, stats, wrap
        >>> slugify("Crème brûlée, s'il vous plaît")
        'creme-brulee-sil-vous-plait'
        >>> snake_case("parseJSONData"), camel_case("hello big world")
        ('parse_json_data', 'helloBigWorld')
        >>> stats("One two. Three!")
        TextStats(words=3, sentences=2, average_word_length=3.66..., reading_time_s=1)
        >>> wrap("the quick brown fox jumps", width=10)
        ['the quick', 'brown fox', 'jumps']

        ```

        On the command line: `python -m textkit slug "Hello, World!"` prints `hello-world`.
        """,
    )
    write(
        "tests/test_readme.py",
        """
        import doctest
        from pathlib import Path

        README = Path(__file__).resolve().parents[1] / "README.md"


        def test_readme_examples_run() -> None:
            flags = doctest.ELLIPSIS
            result = doctest.testfile(str(README), module_relative=False, optionflags=flags)
            assert result.attempted > 0
            assert result.failed == 0
        """,
    )


def release(attempt: int) -> None:
    """Version 0.2.0, with a changelog."""
    edit("textkit/__init__.py", '__version__ = "0.1.0"', '__version__ = "0.2.0"')
    write(
        "CHANGELOG.md",
        """
        # Changelog

        ## 0.2.0

        - Words are Unicode-aware and keep inner apostrophes.
        - New: `slugify`, `snake_case`, `kebab_case`, `camel_case`, `stats`, `wrap` and `fill`.
        - New: the `python -m textkit` command line.

        ## 0.1.0

        - `words` and `word_count`.
        """,
    )
    write(
        "tests/test_version.py",
        """
        from pathlib import Path

        import textkit


        def test_version_and_changelog_agree() -> None:
            changelog = Path(__file__).resolve().parents[1] / "CHANGELOG.md"
            assert textkit.__version__ == "0.2.0"
            assert f"## {textkit.__version__}" in changelog.read_text(encoding="utf-8")
        """,
    )


TASKS: dict[str, Callable[[int], None]] = {
    f.__name__: f for f in (tokens, slugify, case, stats, wrap, exports, cli, readme, release)
}


def main(argv: list[str]) -> int:
    """``agent.py TASK ATTEMPT``."""
    if len(argv) != 2 or argv[0] not in TASKS:
        print(f"usage: agent.py {{{'|'.join(TASKS)}}} ATTEMPT", file=sys.stderr)
        return 2
    task, attempt = argv[0], int(argv[1])
    print(f"agent: task {task}, attempt {attempt}")
    TASKS[task](attempt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

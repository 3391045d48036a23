"""The task page's reason: the finding, without the verify command that found it."""

from __future__ import annotations

import pytest

from orchardist.web.taskdoc import finding

CMD = "python /root/.cache/orchardist/repo-1234/io/run-tests.py --x: y"


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        (
            f"verify_failed: verify command failed (1): {CMD}: 1 test(s) newly failing: t::bad",
            "verify_failed: verify command failed (1); 1 test(s) newly failing: t::bad",
        ),
        (
            f"verify command failed (2): {CMD}: exit 2; failing: a::b, c::d",
            "verify command failed (2); exit 2; failing: a::b, c::d",
        ),
        (f"timeout: verify command timed out: {CMD}", "timeout: verify command timed out"),
        (f"check failed (1): {CMD}", "check failed (1)"),
        (
            f"verify_failed: check: check still fails (exit 1); failing: t::x: {CMD}",
            "verify_failed: check: check still fails (exit 1); failing: t::x",
        ),
        ("dependency base failed", "dependency base failed"),
        (None, ""),
    ],
)
def test_a_reason_shows_the_finding_not_the_command(reason: str | None, shown: str) -> None:
    assert finding(reason) == shown

"""The baseline-aware oracle end to end: real repositories whose suites already fail on the base.

The repository's suite has one test, ``test_discount``, that fails on the base (a known bug).
Candidates are judged against the base's own run of each command: a failure the base already
had does not block them, a test they break does, a ``check`` must fail on the base and pass on
the candidate, and ``verify = "auto"`` runs only the tests of the files a candidate touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e_support import (
    assert_nothing_left,
    by_candidate,
    log_of,
    toml_files,
)
from orchardist import RunState
from orchardist.verify.oracle import CHECK_DOES_NOT_REPRODUCE, baseline_key
from support import Finished, baselines_cached, make_repo, write_plan

RunPlan = Callable[..., Finished]

SUITE = "python -m pytest -q -p no:cacheprovider"
# The verify of the check tests, which are about the check: test_price without pytest (the
# suite exits 1 on every tree, which runs it again on the base: two pytest runs, ~0.8 s of CPU)
PRICE_WORKS = "python -c 'from shop import price; assert price(1.234) == 1.23'"
SHOP = """\
def price(amount):
    return round(amount, 2)


def discount(amount, percent):
    return amount * percent / 100
"""
TEST_SHOP = """\
from shop import discount, price


def test_price():
    assert price(1.234) == 1.23


def test_discount():  # fails on the base: discount() returns the discount, not the price
    assert discount(200, 10) == 180
"""

# What candidates write, as TOML inline tables for scripted steps
ADD_TAX = toml_files(
    {
        "tax.py": "def tax(amount):\n    return round(amount * 0.2, 2)\n",
        "tests/test_tax.py": "from tax import tax\n\n\ndef test_tax():\n    assert tax(10) == 2\n",
    }
)
BREAK_PRICE = toml_files({"shop.py": SHOP.replace("round(amount, 2)", "round(amount, 1)")})
FIX_DISCOUNT = toml_files({"shop.py": SHOP.replace("percent / 100", "(100 - percent) / 100")})
ADD_TOTAL = toml_files({"shop.py": "\n\ndef total(items):\n    return sum(items)\n"})
NOTES = toml_files({"notes.py": "NOTE = 1\n"})
ONE_COMMENT = toml_files({"tax.py": "# one\n"})
TWO_COMMENTS = toml_files({"tax.py": "# one\n# two\n"})


@pytest.fixture
def shop_repo(tmp_path: Path) -> Iterator[Path]:
    """A repository whose suite has one passing test and one failing on the base."""
    yield make_repo(
        tmp_path / "repo",
        {
            ".gitignore": "__pycache__/\n.pytest_cache/\n",
            "shop.py": SHOP,
            "tests/test_shop.py": TEST_SHOP,
        },
    )


def baseline_logs(run: Finished) -> dict[str, str]:
    """The baseline runs' logs by file name; each real run appends its ``$ command`` line."""
    folder = run.ws.state_dir / "logs" / "baselines"
    return {p.name: p.read_text() for p in sorted(folder.glob("*.log"))}


# -- failures the base already had --------------------------------------------------------------


def test_a_failure_already_on_the_base_is_tolerated_and_a_newly_broken_test_is_not(
    shop_repo: Path, run_plan: RunPlan
) -> None:
    # Given: candidate 0 adds a taxed price with its own test; candidate 1, with the smaller
    # diff, breaks test_price, which passes on the base
    plan = write_plan(
        shop_repo,
        f"""
        [run]
        max_parallel = 2
        verify = "{SUITE}"

        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        "tax/0" = {{ write = {ADD_TAX} }}
        "tax/1" = {{ write = {BREAK_PRICE} }}

        [[task]]
        id = "tax"
        candidates = 2
        """,
    )

    run = run_plan(plan)

    # Then: both runs exited 1; only the one whose failures were already on the base passed
    assert run.state is RunState.DONE, run.doc
    task = run.task("tax")
    good, bad = by_candidate(task)[0], by_candidate(task)[1]
    assert task["winner"] == {"candidate": 0, "attempt": good["n"]}
    assert (good["state"], good["verdict"]) == ("merged", "verified")
    assert "1 test(s) already failing on the base" in good["detail"]
    assert "1 failed, 2 passed" in log_of(good)  # its suite did exit 1
    assert bad["changed_lines"] < good["changed_lines"]
    assert (bad["state"], bad["failure"], bad["verdict"]) == ("failed", "verify_failed", "failed")
    assert "passed on the base now fail: tests.test_shop::test_price" in bad["detail"]
    assert "test_discount" not in bad["detail"]
    assert "2 failed" in log_of(bad)
    assert run.read("tests/test_tax.py").startswith("from tax import tax")
    assert run.read("tests/test_shop.py") == TEST_SHOP.rstrip("\n")  # the failing test untouched
    assert baselines_cached(run.ws) == 1  # both candidates on one base: one base run
    assert_nothing_left(run)


# -- reproduction checks ------------------------------------------------------------------------


def test_a_check_that_passes_on_the_base_is_flagged_and_not_accepted(
    shop_repo: Path, run_plan: RunPlan
) -> None:
    # Given: a "reproduction" that already passes on the base, and a candidate that passes verify
    plan = write_plan(
        shop_repo,
        f"""
        [run]
        verify = "{PRICE_WORKS}"

        [agents.fake]
        kind = "scripted"
        script = {{ fix = {{ write = {ADD_TAX} }} }}

        [[task]]
        id = "fix"
        check = "python -m pytest -q -p no:cacheprovider tests/test_shop.py::test_price"
        """,
    )

    run = run_plan(plan)

    # Then: the candidate is refused with the flag, visible in its detail and in the events
    assert run.state is RunState.FAILED
    [attempt] = run.task("fix")["attempts"]
    assert (attempt["state"], attempt["failure"], attempt["verdict"]) == (
        "failed",
        "verify_failed",
        "failed",
    )
    assert "check does not reproduce" in attempt["detail"]
    assert "check does not reproduce" in run.task("fix")["reason"]
    assert "::test_price" not in log_of(attempt)  # the check ran on the base only
    ended = [e for e in run.events("attempt", "fix") if e.data["state"] == "failed"]
    assert [e.data.get("flag") for e in ended] == [CHECK_DOES_NOT_REPRODUCE]
    assert run.task("fix")["winner"] is None
    assert run.commits() == []
    assert_nothing_left(run)


def test_a_check_that_fails_on_the_base_accepts_only_the_candidate_that_makes_it_pass(
    shop_repo: Path, run_plan: RunPlan
) -> None:
    # Given: test_discount reproduces the bug; candidate 0 fixes it, candidate 1 does not
    plan = write_plan(
        shop_repo,
        f"""
        [run]
        max_parallel = 2
        verify = "{PRICE_WORKS}"

        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        "fix/0" = {{ write = {FIX_DISCOUNT} }}
        "fix/1" = {{ append = {ADD_TOTAL} }}

        [[task]]
        id = "fix"
        candidates = 2
        check = "python -m pytest -q -p no:cacheprovider tests/test_shop.py::test_discount"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    task = run.task("fix")
    fixed, unfixed = by_candidate(task)[0], by_candidate(task)[1]
    assert task["winner"] == {"candidate": 0, "attempt": fixed["n"]}
    assert (fixed["state"], fixed["verdict"]) == ("merged", "verified")
    assert "and the check" in fixed["detail"]
    assert (unfixed["state"], unfixed["verdict"]) == ("failed", "failed")
    assert "check still fails" in unfixed["detail"]
    assert "test_discount" in unfixed["detail"]
    flags = [e.data.get("flag") for e in run.events("attempt", "fix")]
    assert CHECK_DOES_NOT_REPRODUCE not in flags
    assert_nothing_left(run)


def test_a_check_that_does_not_reproduce_is_not_retried(shop_repo: Path, run_plan: RunPlan) -> None:
    # Given: the same non-reproducing check, with retries to spare
    plan = write_plan(
        shop_repo,
        f"""
        [run]
        verify = "{PRICE_WORKS}"
        retry_backoff = "0.05s"

        [agents.fake]
        kind = "scripted"
        script = {{ fix = {{ write = {ADD_TAX} }} }}

        [[task]]
        id = "fix"
        retries = 1
        check = "python -m pytest -q -p no:cacheprovider tests/test_shop.py::test_price"
        """,
    )

    run = run_plan(plan)

    # Then: a new candidate cannot make a check fail on the base: the task fails at once
    assert run.state is RunState.FAILED
    assert len(run.task("fix")["attempts"]) == 1
    assert "check does not reproduce" in run.task("fix")["reason"]


# -- verify = "auto" ----------------------------------------------------------------------------


def test_auto_verify_runs_the_tests_of_the_changed_files_and_says_which(
    shop_repo: Path, run_plan: RunPlan
) -> None:
    # Given: one task touches shop.py (tested by tests/test_shop.py), one adds notes.py (no
    # tests), one adds tax.py with its own test file
    plan = write_plan(
        shop_repo,
        f"""
        [run]
        max_parallel = 1
        verify = "{SUITE}"

        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        total = {{ append = {ADD_TOTAL} }}
        notes = {{ write = {NOTES} }}
        tax = {{ write = {ADD_TAX} }}

        [[task]]
        id = "total"
        verify = "auto"

        [[task]]
        id = "notes"
        verify = "auto"

        [[task]]
        id = "tax"
        verify = "auto"
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    [total] = run.task("total")["attempts"]
    log = log_of(total)
    assert "auto: 1 test path(s) chosen for the changed files: tests/test_shop.py" in log
    assert "$ python -m pytest -q tests/test_shop.py\n" in log
    assert f"$ {SUITE}\n" not in log
    assert "already failing on the base" in total["detail"]  # test_discount, as on the base

    [notes] = run.task("notes")["attempts"]
    log = log_of(notes)
    assert "auto: no tests found for the changed files; running the default suite" in log
    assert f"$ {SUITE}\n" in log
    assert "$ python -m pytest -q tests/" not in log

    [tax] = run.task("tax")["attempts"]
    log = log_of(tax)
    assert "auto: 1 test path(s) chosen for the changed files: tests/test_tax.py" in log
    assert "$ python -m pytest -q tests/test_tax.py\n" in log
    assert "test_shop" not in log
    assert tax["detail"] == "1 verify command(s) passed"
    assert_nothing_left(run)


# -- baseline reuse -----------------------------------------------------------------------------


def test_one_baseline_run_per_base_commit_and_command_whatever_the_number_of_candidates(
    shop_repo: Path, run_plan: RunPlan
) -> None:
    # Given: two independent tasks of three candidates each, all on the base; every candidate's
    # suite exits 1 (the known bug), so each one needs the base's results to be judged
    plan = write_plan(
        shop_repo,
        f"""
        [run]
        max_parallel = 6
        verify = "{SUITE}"

        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        "tax/0" = {{ write = {ADD_TAX} }}
        "tax/1" = {{ write = {ADD_TAX}, append = {ONE_COMMENT} }}
        "tax/2" = {{ write = {ADD_TAX}, append = {TWO_COMMENTS} }}
        "total/0" = {{ append = {ADD_TOTAL} }}
        "total/1" = {{ append = {ADD_TOTAL}, write = {NOTES} }}
        "total/2" = {{ write = {BREAK_PRICE} }}

        [[task]]
        id = "tax"
        candidates = 3

        [[task]]
        id = "total"
        candidates = 3
        """,
    )

    run = run_plan(plan)

    assert run.state is RunState.DONE, run.doc
    attempts = [a for t in ("tax", "total") for a in run.task(t)["attempts"]]
    assert len(attempts) == 6
    assert {a["base"] for a in attempts} == {run.run.base_commit}
    assert all(log_of(a).count(f"$ {SUITE}\n") == 1 for a in attempts)  # six candidate runs
    # The second merge landed on a moved tip and was verified again, against that tip.
    first_merge = run.commits()[0]
    expected = {
        f"baseline-{baseline_key(commit, f'[.] {SUITE}')[:16]}.log"
        for commit in (run.run.base_commit, first_merge)
    }
    logs = baseline_logs(run)
    assert set(logs) == expected
    assert all(text.count(f"$ {SUITE}\n") == 1 for text in logs.values())  # each ran once
    # The merged tree's own results were kept, without a run of their own: a merge on top of
    # it is judged against them.
    second_merge = run.commits()[1]
    kept = run.ws.store.baseline(baseline_key(second_merge, f"[.] {SUITE}"))
    assert kept is not None and kept.exit_code == 1 and kept.report is not None
    assert "test_discount" in str(kept.report.failed)
    assert baselines_cached(run.ws) == 3
    assert_nothing_left(run)

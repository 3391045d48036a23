"""Baselines of merged trees: a merge verification's outcomes serve as the baseline of the tree
it verified, and a baseline asked while that verification runs waits for them instead of
running the commands a second time."""

from __future__ import annotations

import threading
from pathlib import Path

from orchardist.confine.procs import CancelToken
from orchardist.executors.baselines import LocalBaselines
from orchardist.state.store import Store
from orchardist.verify.oracle import CommandOutcome

COMMIT = "c" * 40


class Host:
    """What the baselines read of their executor when they are not run: locks and a clock."""

    def __init__(self, folder: Path) -> None:
        self.log_root = folder / "logs"

    def clock(self) -> float:
        return 0.0


class Counting(LocalBaselines):
    """Baselines whose runs are counted instead of made; ``ran`` is set by the first."""

    def __init__(self, store: Store, folder: Path) -> None:
        super().__init__(Host(folder), store)  # type: ignore[arg-type]
        self.runs = 0
        self.ran = threading.Event()

    def run(self, *args: object) -> tuple[CommandOutcome, bool]:  # type: ignore[override]
        self.runs += 1
        self.ran.set()
        return CommandOutcome("suite", 0), False


def test_a_baseline_asked_during_a_merge_verification_of_its_tree_takes_that_verifications_outcome(
    tmp_path: Path,
) -> None:
    # Given: a verification of COMMIT's tree under way, its suite failing there (exit 1)
    store = Store.in_memory()
    baselines = Counting(store, tmp_path)
    got: list[CommandOutcome] = []

    def ask() -> None:
        got.append(baselines.outcome(COMMIT, "suite", ".", 60.0, cancel=CancelToken()))

    with baselines.verifying(COMMIT):
        # When: a baseline of that tree is asked meanwhile
        asker = threading.Thread(target=ask)
        asker.start()
        # (a run would come at once; waiting for one can only make this test pass wrongly)
        assert not baselines.ran.wait(1.0), "the baseline ran beside the verification"
        # and the verification keeps its outcome and ends
        baselines.keep(COMMIT, ".", False, CommandOutcome("suite", 1))
    asker.join(timeout=30)
    # Then: the asker got the verification's outcome; the commands never ran as a baseline
    assert [o.exit_code for o in got] == [1]
    assert baselines.runs == 0
    # And: with no verification under way, an unknown baseline is run
    assert baselines.outcome("d" * 40, "suite", ".", 60.0).exit_code == 0
    assert baselines.runs == 1
    store.close()

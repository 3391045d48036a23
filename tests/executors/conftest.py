"""The Ray cluster the Ray tests share, one per pytest-xdist worker that runs them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ray_support import RayCluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A local cluster for the whole session, always torn down. tests/conftest.py's
    ``ONE_WORKER_FILES`` keeps each Ray test file on one pytest-xdist worker: one cluster per
    file, or one for both when a worker runs both."""
    started = RayCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        started.start(workers=2, cpus_per_worker=2)
        yield started
    finally:
        started.stop()
    assert started.leftovers() == set()

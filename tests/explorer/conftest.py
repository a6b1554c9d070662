"""Explorer fixtures: one synthetic archive per session (shared by the query, page and browser tests)."""

from __future__ import annotations

import pytest

from builder import config
from explorer.query import Archive
from explorer.sample import write_synthetic_archive
from explorer.sources import resolve_source

SYNTHETIC_KERNELS = 300


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory):
    return write_synthetic_archive(tmp_path_factory.mktemp("synthetic"), SYNTHETIC_KERNELS)


@pytest.fixture(scope="session")
def synthetic_archive(synthetic_dir) -> Archive:
    return Archive(resolve_source(str(synthetic_dir)))


@pytest.fixture
def source_env(monkeypatch):
    """Point the app at a source for this test: source_env(path)."""

    def use(path) -> None:
        monkeypatch.setenv(config.EXPLORER_SOURCE_ENV, str(path))

    return use

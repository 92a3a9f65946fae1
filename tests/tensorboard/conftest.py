"""Every tab test keeps its report cache in a temporary folder (`TRACEINSIGHT_CACHE`), never the user's."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinsight.listing import CACHE_ENV


@pytest.fixture(autouse=True)
def report_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder the tab's and the CLI's report cache use in this test."""
    folder = tmp_path_factory.mktemp("report-cache")
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder

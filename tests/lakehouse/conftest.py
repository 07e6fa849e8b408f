"""The ``lake`` fixture: each lakehouse sink test on every kind of table
(``support/lakes.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.lakes import LAKES, Lake


@pytest.fixture(params=LAKES)
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    if request.param != "memory":
        pytest.importorskip("deltalake")
    return Lake(request.param, tmp_path)

"""Every Python code block of the README runs as printed, against a real PostgreSQL (15
and 18) holding the tables the README's examples name, each block in a fresh database and
a fresh working directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Database

pytestmark = pytest.mark.server

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)

SCHEMA = """
CREATE TABLE orders (id int PRIMARY KEY, note text);
CREATE TABLE items (id int PRIMARY KEY, order_id int, qty int);
INSERT INTO orders SELECT g, 'order ' || g FROM generate_series(1, 20) g;
INSERT INTO items SELECT g, g % 20 + 1, g FROM generate_series(1, 50) g;
CREATE PUBLICATION pub FOR TABLE orders, items;
"""


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=lambda i: f"block{i + 1}")
def test_readme_block_runs(db: Database, tmp_path: Path, index: int) -> None:
    db.conn.execute(SCHEMA)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env["PGWIRE_CDC_DSN"] = db.dsn
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, BLOCKS[index] + "\n" + proc.stderr[-3000:]
    # Slots the block left behind would hold WAL on the shared cluster.
    db.conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
        " WHERE database = current_database() AND NOT active"
    )

"""Every Python code block of the README and of the pages in docs/ runs as printed, against
a real PostgreSQL (15 and 18) holding the tables the examples name, each block in a fresh
database and a fresh working directory.

Only fences opened with ```python run; a block meant to be read, not run, uses another
info string (```text, ```sql, ```bash)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Database

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text(encoding="utf-8"))


BLOCKS = python_blocks(README)


def distinct_blocks() -> list[tuple[str, int, str]]:
    """(page relative to the repository, index on the page, code) of every block, a block
    printed on several pages once (where it first appears): the same code, run once."""
    seen: set[str] = set()
    blocks = []
    for page in PAGES:
        for index, code in enumerate(python_blocks(page), start=1):
            if code not in seen:
                seen.add(code)
                blocks.append((page.relative_to(ROOT).as_posix(), index, code))
    return blocks


ALL_BLOCKS = distinct_blocks()

SCHEMA = """
CREATE TABLE orders (id int PRIMARY KEY, note text);
CREATE TABLE items (id int PRIMARY KEY, order_id int, qty int);
INSERT INTO orders SELECT g, 'order ' || g FROM generate_series(1, 20) g;
INSERT INTO items SELECT g, g % 20 + 1, g FROM generate_series(1, 50) g;
CREATE PUBLICATION pub FOR TABLE orders, items;
"""


def test_the_readme_has_python_blocks() -> None:
    # Streaming, the Delta tables, the Delta pipeline in a Spark driver, a table read by
    # Spark tasks, the offline decoder.
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize(
    ("page", "index", "code"), ALL_BLOCKS, ids=[f"{p}:block{i}" for p, i, _ in ALL_BLOCKS]
)
def test_block_runs(db: Database, tmp_path: Path, page: str, index: int, code: str) -> None:
    db.conn.execute(SCHEMA)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env["PGWIRE_CDC_DSN"] = db.dsn
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{page}, block {index}:\n{code}\n{proc.stderr[-3000:]}"
    # Slots the block left behind would hold WAL on the shared cluster.
    db.conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
        " WHERE database = current_database() AND NOT active"
    )

"""What users ``pip install`` is what we test: the wheel of ``make wheel`` (abi3, release)
goes into a brand-new venv — no source tree on the path — and streams a live change from a
real server; its console script, type stubs and dependency extras are there."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The wheels of ``make wheel``, or those ``make test`` checks (``$PGWIRE_CDC_WHEELS``: the
#: Makefile's ``check-wheel``, this machine's wheel as ``make build`` built it, with the
#: test-only client classes as well; ``check-wheels`` adds the aarch64 one).
WHEELS = Path(os.environ.get("PGWIRE_CDC_WHEELS", ROOT / "target" / "wheels"))

SCRIPT = """
import json, sys
import pgwire_cdc
dsn, until = sys.argv[1], int(sys.argv[2])
rows = []
for batch in pgwire_cdc.stream(dsn, publication="pub", slot="wheel", until_lsn=until):
    for name, table in batch.tables.items():
        rows += [(name, r["id"], r["v"], r["_change_type"]) for r in table.to_pylist()]
    batch.ack()
print(json.dumps({"file": pgwire_cdc.__file__, "rows": rows}))
"""


def wheels() -> dict[str, Path]:
    """The wheels of ``make wheel``, by machine (``x86_64``, ``aarch64``)."""
    found = {
        machine: path
        for path in WHEELS.glob("pgwire_cdc-*.whl")
        for machine in ("x86_64", "aarch64")
        if path.name.endswith(f"_{machine}.whl")
    }
    if platform.machine() not in found:
        pytest.fail(
            f"{WHEELS} lacks this machine's wheel: run `make wheel` first (`make test` does)"
        )
    return found


def newest_wheel() -> Path:
    """This machine's wheel."""
    return wheels()[platform.machine()]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_wheels_need_only_glibc_2_17(machine: str) -> None:
    """manylinux2014: installs on RHEL/Rocky 8, Debian 11, Ubuntu 20.04, Amazon Linux 2."""
    found = wheels()
    if machine not in found:
        # `make test` builds this machine's wheel only; `make check-wheels` and `make
        # wheel` build both.
        pytest.skip(f"no {machine} wheel in {WHEELS}: `make check-wheels` builds it")
    wheel = found[machine]
    tag = f"manylinux2014_{machine}.manylinux_2_17_{machine}"
    assert wheel.name.endswith(f"-cp310-abi3-{tag}.whl"), wheel.name
    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f'"manylinux_2_17_{machine}"' in " ".join(shown.split()), shown


def test_wheel_contents() -> None:
    wheel = newest_wheel()
    assert "abi3" in wheel.name and "manylinux" in wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = z.read(metadata).decode()
        entry_points = z.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    assert {"pgwire_cdc/py.typed", "pgwire_cdc/_native.pyi"} <= names
    # Spark 4 registers the data source of this top-level module by itself.
    assert "pyspark_pgwire_cdc/__init__.py" in names
    assert any(n.startswith("pgwire_cdc/_native") and n.endswith(".so") for n in names)
    assert not any(n.startswith(("tests/", "benches/", "rust/")) for n in names)
    # The test harness (clusters run with fsync=off) is not part of the package.
    assert "pgwire_cdc/server.py" not in names
    assert "pgwire-cdc=pgwire_cdc.cli:main" in entry_points.replace(" ", "")
    for extra in ("spark", "embedded"):
        assert f"Provides-Extra: {extra}" in meta


@pytest.mark.server
def test_wheel_in_a_fresh_venv_streams(pg18_cluster: Any, tmp_path: Path) -> None:
    wheel = newest_wheel()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        timeout=600,
    )
    db = pg18_cluster.create_database()
    try:
        with pg18_cluster.connect(db) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
            conn.execute("CREATE PUBLICATION pub FOR TABLE t")
            conn.execute("INSERT INTO t VALUES (1, 'snapshot')")
            conn.execute(
                "SELECT pg_create_logical_replication_slot('wheel', 'pgoutput')"
            )  # no snapshot: the insert below comes from the stream
            conn.execute("INSERT INTO t VALUES (2, 'streamed')")
            row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
            assert row is not None
            until = int(row[0])
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        proc = subprocess.run(
            [str(py), "-c", SCRIPT, pg18_cluster.dsn_for(db), str(until)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,  # not the source tree
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert str(venv) in out["file"], "imported from the fresh venv, not the source tree"
        assert out["rows"] == [["public.t", 2, "streamed", "insert"]]
        cli = subprocess.run(
            [str(venv / "bin" / "pgwire-cdc"), "--help"], capture_output=True, text=True, env=env
        )
        assert cli.returncode == 0 and "demo" in cli.stdout
    finally:
        pg18_cluster.drop_database(db)

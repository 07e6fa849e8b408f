"""The snapshot keeper: a small process holding an exported snapshot open while Spark
tasks read under it (see :mod:`pgwire_cdc.spark.snapshot`).

:func:`export_snapshot` starts it (``python -m pgwire_cdc.spark.keeper``, the request on
its stdin: the DSN never goes on a command line) and reads the snapshot's name from its
stdout. The keeper lets go once every range has been read (tasks say so with a
notification, :func:`done_payload`) and ``keep`` seconds more have passed, when the Spark
driver exits, or after ``ttl`` seconds, whichever comes first.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from .. import _native
from ..connection import connect
from ..errors import ConfigError, Error

#: The channel tasks notify when they have read their partition.
DONE_CHANNEL = "pgwire_cdc_snapshot_read"


def done_payload(snapshot: str, index: int) -> str:
    """The notification a task sends once it has read range ``index`` under ``snapshot``:
    short whatever the query (a NOTIFY payload holds less than 8000 bytes)."""
    return f"{snapshot} {index}"


def read_done(payload: str, snapshot: str) -> int | None:
    """The range a :func:`done_payload` says was read under ``snapshot``; None for
    another snapshot's or a malformed one."""
    name, _, index = payload.partition(" ")
    if name != snapshot or not index.isdigit():
        return None
    return int(index)


def _spark_driver_pid() -> int | None:
    """The JVM this process descends from (Spark's driver, in local mode the whole
    application), found through /proc; None elsewhere."""
    pid = os.getpid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            return None
        if comm == "java":
            return pid
        pid = int(fields[1])
        if pid <= 1:
            return None
    return None


def export_snapshot(
    dsn: str, queries: Sequence[str], ttl: float, keep: float, slot: str | None = None
) -> tuple[str, int | None, subprocess.Popen[bytes]]:
    """Starts a keeper process holding a new exported snapshot until each of the ranges
    ``queries`` has been read (see :func:`pgwire_cdc.spark.snapshot.read_partition`);
    returns its name and, when the keeper created the logical replication ``slot`` to
    export it, the slot's consistent point."""
    request = {
        "dsn": dsn,
        "ranges": len(queries),
        "ttl": ttl,
        "keep": keep,
        "watch": _spark_driver_pid(),
        "slot": slot,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgwire_cdc.spark.keeper"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the planning process
    )
    assert proc.stdin is not None and proc.stdout is not None
    # The DSN goes through a pipe, never the command line (it may hold a password).
    proc.stdin.write(json.dumps(request).encode())
    proc.stdin.close()
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("snapshot "):
        proc.wait(timeout=10)
        raise ConfigError(
            "could not export a snapshot for the Spark read"
            + (f": {line}" if line else " (the keeper process failed to start)")
        )
    words = line.split(" ")
    return words[1], (int(words[2]) if len(words) > 2 else None), proc


def _keeper(request: dict[str, Any]) -> None:
    """Holds an exported snapshot (see the module documentation)."""
    dsn = request["dsn"]
    pending = set(range(int(request["ranges"])))
    started = time.monotonic()
    holder: Any
    try:
        listener = connect(dsn)
        if request.get("slot"):
            # The slot's own snapshot: valid while its replication session stays idle.
            holder = _native.ReplicationConnection(dsn)
            _, point, exported = holder.create_slot(
                request["slot"], temporary=False, export_snapshot=True
            )
            name, announce = str(exported), f"snapshot {exported} {point}"
        else:
            holder = connect(dsn, autocommit=False)
            holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            row = holder.execute("SELECT pg_export_snapshot()").fetchone()
            assert row is not None
            name = str(row[0])
            announce = f"snapshot {name}"
    except psycopg.Error as e:
        print(type(e).__name__, flush=True)  # never the message: it may echo the DSN
        return
    except Error as e:  # pgwire_cdc's own messages carry no secret
        print(f"{type(e).__name__}: {e}", flush=True)
        return
    listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(DONE_CHANNEL)))
    print(announce, flush=True)
    sys.stdout.close()
    done_at: float | None = None
    while True:
        now = time.monotonic()
        if now - started > float(request["ttl"]):
            break
        if done_at is not None and now - done_at > float(request["keep"]):
            break
        watch = request.get("watch")
        if watch is not None and not os.path.exists(f"/proc/{watch}"):
            break
        with contextlib.suppress(OSError, ValueError):
            select.select([listener.fileno()], [], [], 1.0)
        for note in listener.notifies(timeout=0, stop_after=0):
            pending.discard(read_done(note.payload, name))
        if not pending and done_at is None:
            done_at = time.monotonic()
    if hasattr(holder, "close"):
        holder.close()
    listener.close()


if __name__ == "__main__":
    _keeper(json.loads(sys.stdin.read()))

"""A primary and a physical standby on loopback, for the failover and standby tests.

`ReplicaPair` starts a primary (a :class:`PgCluster`) whose failover slots wait for the
standby (``synchronized_standby_slots``), makes a physical slot for it, and builds the
standby with ``pg_basebackup -R -S <slot> -X stream`` (the connection string names a
database, so the standby's ``primary_conninfo`` can synchronize logical slots). The
standby runs with ``sync_replication_slots``, ``hot_standby_feedback`` and
``primary_slot_name``: the settings PostgreSQL 17+ needs to keep failover slots in step.

Server commands run as the ``postgres`` OS user when this process is root, as in
:mod:`tests.support.server`.
"""

from __future__ import annotations

import os
import pwd
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from .server import SERVER_OS_USER, PgCluster, PgClusterError, _is_root

#: The physical slot the standby streams WAL through.
PHYSICAL_SLOT = "sb"


class StandbyCluster(PgCluster):
    """A hot standby of ``primary``, made by ``pg_basebackup`` instead of ``initdb``."""

    def __init__(
        self, primary: PgCluster, slot: str = PHYSICAL_SLOT, settings: dict[str, str] | None = None
    ) -> None:
        standby_settings = {
            "sync_replication_slots": "on",
            "hot_standby_feedback": "on",
            "primary_slot_name": f"'{slot}'",
            **(settings or {}),
        }
        super().__init__(primary.bindir, name=f"{primary.name}-standby", settings=standby_settings)
        self.primary = primary
        self.slot = slot

    def init(self) -> None:
        self.basedir = Path(tempfile.mkdtemp(prefix=f"pgwire_cdc-{self.name}-"))
        os.chmod(self.basedir, 0o755)
        if _is_root():
            pw = pwd.getpwnam(SERVER_OS_USER)
            os.chown(self.basedir, pw.pw_uid, pw.pw_gid)
        source = f"host={self.primary.host} port={self.primary.port} user=postgres dbname=postgres"
        result = self._run(
            [
                str(self.bindir / "pg_basebackup"),
                "-D",
                str(self.datadir),
                "-R",
                "-S",
                self.slot,
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
                "-d",
                source,
            ]
        )
        if result.returncode != 0:
            raise PgClusterError(f"pg_basebackup failed:\n{result.stdout}\n{result.stderr}")
        # The copied postgresql.conf is the primary's: its own socket directory, and the
        # standby's settings after it (the last line wins).
        lines = [f"{key} = {value}" for key, value in self.settings.items()]
        lines.append(f"unix_socket_directories = '{self.basedir}'")
        lines.append("synchronized_standby_slots = ''")
        with open(self.datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# pgwire_cdc standby settings\n" + "\n".join(lines) + "\n")

    def promote(self, timeout: int = 60) -> None:
        """``pg_ctl promote -w``: the standby becomes a primary (a new timeline)."""
        self._pg_ctl_or_raise(["promote", "-D", str(self.datadir), "-w", "-t", str(timeout)])

    def wait_replayed(self, lsn: str, timeout: float = 60) -> None:
        """Waits until the standby has replayed the primary's WAL up to ``lsn``."""
        deadline = time.monotonic() + timeout
        with self.connect() as conn:
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)
                ).fetchone()
                if row and row[0]:
                    return
                time.sleep(0.1)
        raise PgClusterError(f"the standby did not replay up to {lsn} in {timeout} s")

    def synced_slot(self, name: str, dbname: str = "postgres") -> dict[str, Any] | None:
        """The standby's row of ``pg_replication_slots`` for ``name`` (synced, temporary,
        failover, confirmed_flush_lsn), or None."""
        with self.connect(dbname) as conn:
            row = conn.execute(
                "SELECT synced, temporary, failover, confirmed_flush_lsn::text"
                " FROM pg_replication_slots WHERE slot_name = %s",
                (name,),
            ).fetchone()
        if row is None:
            return None
        return dict(
            zip(("synced", "temporary", "failover", "confirmed_flush_lsn"), row, strict=True)
        )


class ReplicaPair:
    """A primary and its hot standby (both PostgreSQL 17+ for failover slots)::

    with ReplicaPair("pg18") as pair:
        pair.primary.dsn, pair.standby.dsn, pair.failover_dsn("db")
    """

    def __init__(self, server: str = "pg18", synchronized: bool = True) -> None:
        settings = {"synchronized_standby_slots": f"'{PHYSICAL_SLOT}'"} if synchronized else {}
        self.primary = PgCluster.for_server(server, settings=settings)
        self.standby: StandbyCluster | None = None

    def start(self) -> ReplicaPair:
        self.primary.start()
        with self.primary.connect() as conn:
            conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (PHYSICAL_SLOT,))
        self.standby = StandbyCluster(self.primary)
        self.standby.start()
        return self

    def stop(self) -> None:
        if self.standby is not None:
            self.standby.stop()
        self.primary.stop()

    def __enter__(self) -> ReplicaPair:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def failover_dsn(self, dbname: str) -> str:
        """A DSN listing both servers, reaching whichever accepts writes."""
        assert self.standby is not None
        return (
            f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{self.standby.port}"
            f" user=postgres dbname={dbname} target_session_attrs=read-write"
        )

    def caught_up(self, timeout: float = 60) -> None:
        """Waits until the standby has replayed everything the primary wrote so far."""
        assert self.standby is not None
        with self.primary.connect() as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        self.standby.wait_replayed(row[0], timeout)

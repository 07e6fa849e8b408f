"""A Spark Connect server on loopback, started from the pip pyspark for the tests.

`ConnectServer.start()` runs ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` (the ``spark-connect`` jar ships
in pyspark's ``jars/``) with Delta Lake's and Iceberg's jars and SQL extensions (unless
``delta=False``: neither; Iceberg catalogs are session settings a client sets), a
``local[N]`` master and a free port. The server's Python workers (data sources,
``foreachBatch``, UDFs) run this interpreter (or ``python``), so they import pgwire_cdc as
the client does: a Python data source is pickled by reference, and client and server must
share the Python minor version.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pgwire_cdc.spark.sessions import (
    DELTA_EXTENSION,
    ICEBERG_EXTENSION,
    delta_jars,
    iceberg_jars,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServerError(RuntimeError):
    """The Connect server did not come up."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ConnectServer:
    """One Spark Connect server process; `url` is the ``sc://`` address clients use."""

    def __init__(
        self,
        master: str = "local[2]",
        conf: dict[str, str] | None = None,
        python_path: list[str] | None = None,
        delta: bool = True,
        python: str = sys.executable,
    ) -> None:
        self.master = master
        self.delta = delta
        self.python = python
        self.conf = dict(conf or {})
        #: Folders the server's Python workers import from besides their site-packages
        #: (functions and classes a client sends are pickled by reference to their module).
        self.python_path = list(python_path or [])
        self.port = _free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="pgwire_cdc-connect-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "server.log"

    def start(self, timeout: float = 180.0) -> None:
        import pyspark

        home = Path(pyspark.__file__).resolve().parent
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.pyspark.python": self.python,
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.workdir}",
            **self.conf,
        }
        if self.delta:
            # Delta's catalog is the session catalog; Iceberg's catalogs are set by name
            # (spark.sql.catalog.<name>), at run time too.
            conf.setdefault("spark.sql.extensions", f"{DELTA_EXTENSION},{ICEBERG_EXTENSION}")
            conf.setdefault(
                "spark.sql.catalog.spark_catalog",
                "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            )
        command = [str(home / "bin" / "spark-submit"), "--master", self.master]
        jars = [*delta_jars(), *iceberg_jars()] if self.delta else []
        if jars:
            command += ["--jars", ",".join(jars)]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        command += ["--class", SERVER_CLASS, "spark-internal"]
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": self.python,
            # spark-submit would otherwise start a Connect client shell of its own.
            "SPARK_CONNECT_MODE": "0",
            "PYTHONPATH": os.pathsep.join(
                [*self.python_path, *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        env.pop("SPARK_REMOTE", None)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConnectServerError(
                    f"the Spark Connect server exited with {self.process.returncode}: {self.tail()}"
                )
            with socket.socket() as sock:
                sock.settimeout(0.5)
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        self.stop()
        raise ConnectServerError(f"no Spark Connect server on {self.url} after {timeout:.0f} s")

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

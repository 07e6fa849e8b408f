"""A Spark standalone cluster on loopback, from the pip pyspark, for the tests.

`StandaloneCluster` runs ``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker`` (``SPARK_HOME`` is the pyspark folder), each a JVM of its own
in a process group of its own, on 127.0.0.1 with free ports and logs in its folder. A
driver that connects to `url` gets executors in JVMs of their own, started by the
workers, exactly as on a real cluster; `stop()` ends every process the cluster started
(the workers' executors and their Python workers with them).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


class ClusterError(RuntimeError):
    """The master or a worker did not come up."""


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each."""

    def __init__(self, folder: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        import pyspark

        self.home = Path(pyspark.__file__).resolve().parent
        self.folder = folder
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port = _unused_port()
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _log(self, name: str) -> Path:
        return self.folder / f"{name}.log"

    def _spawn(self, name: str, main: str, *args: str) -> None:
        env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            # The master's REST submission server would take port 6066 whatever --port says.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_LOG_DIR": str(self.folder),
        }
        with self._log(name).open("wb") as log:
            self.processes.append(
                subprocess.Popen(
                    [str(self.home / "bin" / "spark-class"), main, *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.folder,
                    env=env,
                    start_new_session=True,  # its executors join its process group
                )
            )

    def _wait_for(self, name: str, text: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._log(name).read_text(errors="replace").count(text) < count:
            dead = [p.args for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise ClusterError(
                    f"{name}: {text!r} not seen ({'exited: ' + str(dead) if dead else 'timeout'})"
                    f"\n{self.tail(name)}"
                )
            time.sleep(0.2)

    def start_master(self) -> None:
        """Starts the master (it needs a few seconds; :meth:`start_workers` waits)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0",
        )  # fmt: skip

    def start_workers(self, timeout: float = 120.0) -> None:
        """Once the master leads, starts the workers and waits until each has registered
        (a worker that finds no master retries only after several seconds)."""
        self._wait_for("master", "I have been elected leader", 1, timeout)
        for i in range(self.workers):
            self._spawn(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host", "127.0.0.1", "--webui-port", "0",
                "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(self.folder / f"work{i}"),
            )  # fmt: skip
        self._wait_for("master", "Registering worker", self.workers, timeout)

    def tail(self, name: str, lines: int = 30) -> str:
        path = self._log(name)
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Ends every process group the cluster started: SIGTERM, then SIGKILL."""
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            alive = [p for p in self.processes if p.poll() is None]
            for p in alive:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            for p in alive:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        # Executors and Python workers outlive a killed JVM in the group only briefly.
        for p in self.processes:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

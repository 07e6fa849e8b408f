"""A local S3-compatible server for the object-store tests: moto's ``moto_server`` in a
process of its own on a free loopback port, so processes the tests start (the crash
torture's workers) reach it too. It answers conditional writes (``If-None-Match: *``)
as S3 does, which delta-rs commits rely on.

With ``faults=True`` the server is moto's behind a fault injector (faulty_s3.py):
`S3Server.faults` sets a plan (errors, lost answers, an outage, slow requests) and
returns the counts so far.

`S3Server.options` are the delta-rs storage options (also the environment variables
delta-rs and the AWS SDKs read) that reach it; `S3Server.bucket()` creates a bucket.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """``moto_server`` on 127.0.0.1; a context manager that stops it on exit."""

    def __init__(self, faults: bool = False) -> None:
        self.with_faults = faults
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def options(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self) -> S3Server:
        if self.with_faults:
            script = Path(__file__).with_name("faulty_s3.py")
            command = [sys.executable, str(script), "127.0.0.1", str(self.port)]
        else:
            binary = Path(sys.executable).with_name("moto_server")
            found = [str(binary)] if binary.exists() else [shutil.which("moto_server") or ""]
            command = [*found, "-H", "127.0.0.1", "-p", str(self.port)]
        self._proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return self
            except (urllib.error.URLError, ConnectionError):
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on {self.endpoint}") from None
                time.sleep(0.1)

    def bucket(self, prefix: str = "lake") -> str:
        """Creates a new bucket and returns its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(request, timeout=10).close()
        return name

    def faults(self, plan: dict[str, Any] | None = None) -> dict[str, Any]:
        """Sets the fault plan (faulty_s3.py says its keys) when one is given; returns the
        counts of requests and faults so far."""
        assert self.with_faults, "an S3Server(faults=True) takes fault plans"
        data = None if plan is None else json.dumps(plan).encode()
        request = urllib.request.Request(
            f"{self.endpoint}/_faults", data=data, method="POST" if data else "GET"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return dict(json.loads(answer.read()))

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

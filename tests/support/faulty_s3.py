"""moto's S3 server with a fault injector in front of it, at the HTTP level: run as
``python faulty_s3.py HOST PORT`` (tests/support/s3.py's ``S3Server(faults=True)`` does).

The injector sits in the same process as moto, as a WSGI middleware, so connections stay
those of moto's own server (kept alive as S3 keeps them: a TCP proxy in between, opening
one connection per request, wore out loopback ports under delta-rs's request rate). It
answers ``/_faults``:

* ``POST /_faults`` with a JSON plan: ``{"kind": K, "rate": P, "seconds": S, "seed": N,
  "delay": D}`` — for the next ``S`` seconds (no ``seconds``: until the next plan), with
  probability ``P`` per request (drawn from ``random.Random(seed)``):

  - ``errors``: answered ``503 SlowDown`` before the store sees it (S3's answer when it
    sheds load; clients retry it);
  - ``lost``: a write (PUT, POST, DELETE) done by the store, then answered
    ``500 InternalError`` as if its answer had been lost on the way: the client cannot
    tell whether it happened and, retrying, finds it did (a conditional PUT then meets
    ``412 Precondition Failed``);
  - ``outage``: every request answered ``503`` (``rate`` ignored): the store is away;
  - ``slow``: the request waits ``delay`` seconds before the store sees it;
  - ``none``: no fault.

* ``GET /_faults``: the counts so far, ``{"requests": …, "injected": {kind: n}}``.

``_faults`` is no bucket name S3 allows, so it meets no bucket.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]

WRITES = ("PUT", "POST", "DELETE")

ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
    "<Message>{message}</Message><RequestId>chaos</RequestId></Error>"
)


class Faults:
    """The plan in force and the counts; the middleware in front of ``app``."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.kind = "none"
        self.rate = 0.0
        self.delay = 0.0
        self.until = float("inf")
        self.random = random.Random(0)
        self.requests = 0
        self.injected: Counter[str] = Counter()

    def plan(self, plan: dict[str, Any]) -> None:
        with self.lock:
            self.kind = str(plan.get("kind", "none"))
            self.rate = float(plan.get("rate", 1.0))
            self.delay = float(plan.get("delay", 0.0))
            seconds = plan.get("seconds")
            self.until = time.monotonic() + float(seconds) if seconds else float("inf")
            self.random = random.Random(int(plan.get("seed", 0)))

    def draw(self, method: str) -> str:
        """The fault this request meets ("" for none)."""
        with self.lock:
            self.requests += 1
            if self.kind == "none" or time.monotonic() >= self.until:
                return ""
            if self.kind == "outage":
                hit = True
            elif self.kind == "lost" and method not in WRITES:
                hit = False
            else:
                hit = self.random.random() < self.rate
            if hit:
                self.injected[self.kind] += 1
            return self.kind if hit else ""

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").startswith("/_faults"):
            return self.control(environ, start_response)
        fault = self.draw(environ["REQUEST_METHOD"])
        if fault in ("errors", "outage"):
            _drain(environ)
            return _error(start_response, "503 Service Unavailable", "SlowDown", "Reduce rate")
        if fault == "slow":
            time.sleep(self.delay)
        if fault == "lost":
            # The store does it; its answer is dropped and an error sent instead.
            done: list[str] = []
            body = self.app(environ, lambda status, headers, *a: done.append(status))
            try:
                for _ in body:
                    pass
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()
            return _error(start_response, "500 Internal Server Error", "InternalError", "Lost")
        return self.app(environ, start_response)

    def control(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "POST":
            self.plan(json.loads(_drain(environ) or b"{}"))
        with self.lock:
            counts = {"requests": self.requests, "injected": dict(self.injected)}
        payload = json.dumps(counts).encode()
        start_response(
            "200 OK",
            [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
        )
        return [payload]


def _drain(environ: Environ) -> bytes:
    """Reads the request's body, so the kept-alive connection stays in step."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return bytes(environ["wsgi.input"].read(length)) if length else b""


def _error(start_response: StartResponse, status: str, code: str, message: str) -> list[bytes]:
    payload = ERROR_BODY.format(code=code, message=message).encode()
    start_response(
        status,
        [("Content-Type", "application/xml"), ("Content-Length", str(len(payload)))],
    )
    return [payload]


def main() -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))  # as moto_server sets it
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, Faults(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()

"""What some suites need besides PostgreSQL and the package: Java (Spark), the moto S3
server (the object-store suite), DuckDB (a third reader of Delta tables).

Where one is missing, a test that needs it is skipped with the reason. In CI
(``$PGWIRE_CDC_CI`` set, as ``.ci/run`` sets it) a missing one fails the test instead: a CI
run never passes by skipping what it was meant to run.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

#: Set (to anything but ``0``) by ``.ci/run``: a missing requirement fails.
CI_VARIABLE = "PGWIRE_CDC_CI"

#: The Java Spark 4 runs on.
JAVA_MAJOR = 17


def in_ci() -> bool:
    """Whether the tests run in CI."""
    return os.environ.get(CI_VARIABLE, "") not in ("", "0")


def missing(reason: str) -> NoReturn:
    """Skips the test for ``reason``; in CI, fails it."""
    if in_ci():
        pytest.fail(f"{reason} (${CI_VARIABLE} is set: CI skips nothing)", pytrace=False)
    pytest.skip(reason)


@functools.cache
def _java_problem() -> str | None:
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home, "bin", "java") if home else None
    binary = str(candidate) if candidate and candidate.exists() else shutil.which("java")
    if binary is None:
        return f"Spark needs Java {JAVA_MAJOR} or later: no java on PATH and no $JAVA_HOME"
    try:
        out = subprocess.run(
            [binary, "-version"], capture_output=True, text=True, timeout=60
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Spark needs Java {JAVA_MAJOR} or later: {binary} -version failed: {e}"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if found is None:
        return f"Spark needs Java {JAVA_MAJOR} or later: no version in {binary} -version"
    major = int(found[1]) if found[1] != "1" else int(found[2] or 0)
    if major < JAVA_MAJOR:
        return f"Spark needs Java {JAVA_MAJOR} or later; {binary} is Java {major}"
    return None


def java() -> None:
    """Java 17 or later (``$JAVA_HOME/bin/java``, else ``java`` on PATH), for Spark."""
    problem = _java_problem()
    if problem is not None:
        missing(problem)


def module(name: str, what: str) -> ModuleType:
    """The Python module ``name`` (of requirements-dev.txt), which ``what`` needs."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{what} needs the Python module {name} (requirements-dev.txt): {e}")


def moto_server() -> str:
    """The ``moto_server`` program (the ``moto[server]`` package of requirements-dev.txt):
    next to this interpreter, else on PATH."""
    beside = Path(sys.executable).with_name("moto_server")
    found = str(beside) if beside.exists() else shutil.which("moto_server")
    if found is None:
        missing("the object-store tests need moto_server (moto[server], requirements-dev.txt)")
    return found

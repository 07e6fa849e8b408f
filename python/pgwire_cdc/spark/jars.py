"""The Delta Lake jars Spark loads for ``session(delta=True)``, pinned, and
:func:`download`, which fetches them from Maven Central (``pgwire-cdc jars DIR``).

Spark resolves ``DELTA_SPARK_PACKAGE`` through Ivy (``spark.jars.packages``) when
``$PGWIRE_CDC_DELTA_JARS`` names no folder of jars. Where Ivy cannot resolve it (a proxy
that blocks it, a repository manager without every parent POM or BOM), the same jars as
plain files do: :data:`DELTA_JARS` is delta-spark and each runtime dependency that PySpark
4.1 does not ship itself (Spark's own Hadoop, Parquet, Jackson and Scala win, as in
:func:`pgwire_cdc.spark.delta_jars`). Pinned versions, so nothing is resolved: each file is
checked against the SHA-1 the repository publishes beside it.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError

#: The Delta Lake build for the pinned PySpark minor version (4.1): Delta publishes one
#: artifact per Spark minor version, and a mismatch fails at run time.
DELTA_SPARK_PACKAGE = "io.delta:delta-spark_4.1_2.13:4.4.0"

#: ``group:artifact:version`` of every jar :func:`download` fetches: delta-spark and the
#: runtime dependencies (as Maven resolves them) that PySpark 4.1's ``jars/`` lacks.
DELTA_JARS = (
    DELTA_SPARK_PACKAGE,
    "io.delta:delta-storage:4.4.0",
    "io.delta:delta-kernel-api:4.4.0",
    "io.delta:delta-kernel-defaults:4.4.0",
    "io.delta:delta-kernel-unitycatalog:4.4.0",
    "io.unitycatalog:unitycatalog-client:0.6.0",
    "io.unitycatalog:unitycatalog-hadoop:0.6.0",
    "com.fasterxml.jackson.datatype:jackson-datatype-jdk8:2.13.5",
    "commons-logging:commons-logging:1.3.0",
    "javax.annotation:javax.annotation-api:1.3.2",
    "org.roaringbitmap:shims:0.9.25",
)

#: The Iceberg Spark runtime for the pinned PySpark minor version (4.1): one shaded jar
#: (Iceberg publishes one per Spark minor version, as Delta does).
ICEBERG_SPARK_PACKAGE = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"

#: The SQLite JDBC driver of the local JDBC catalog (:mod:`pgwire_cdc.iceberg.catalog`).
SQLITE_JDBC_PACKAGE = "org.xerial:sqlite-jdbc:3.54.1.0"

#: What ``session(iceberg=True)`` loads: ``deps/iceberg/pom.xml`` pins the same.
ICEBERG_JARS = (ICEBERG_SPARK_PACKAGE, SQLITE_JDBC_PACKAGE)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

#: Seconds a download may stall before it fails.
TIMEOUT_S = 60.0


def jar_name(coordinate: str) -> str:
    """``artifact-version.jar``, the file name Maven gives a jar."""
    _, artifact, version = coordinate.split(":")
    return f"{artifact}-{version}.jar"


def jar_url(coordinate: str, repository: str = MAVEN_CENTRAL) -> str:
    """Where a Maven repository keeps the jar of ``group:artifact:version``."""
    group, artifact, version = coordinate.split(":")
    return f"{repository.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/" + jar_name(
        coordinate
    )


def _sha1(path: Path) -> str:
    digest = hashlib.sha1(usedforsecurity=False)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            data: bytes = response.read()
            return data
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise ConfigError(
            f"could not download {url}: {reason}. Check the network (a proxy is read from "
            "$HTTPS_PROXY), or give a repository that mirrors Maven Central (--repository)"
        ) from None


def download(
    folder: str | os.PathLike[str],
    repository: str = MAVEN_CENTRAL,
    progress: Callable[[str], None] = print,
) -> list[Path]:
    """Downloads :data:`DELTA_JARS` into ``folder`` (created if needed), each checked
    against the repository's ``.sha1``; a jar already there with the right checksum is
    kept. Returns the jars' paths. Raises :class:`ConfigError` when a download fails or a
    checksum does not match (nothing half-written is left)."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, coordinate in enumerate(DELTA_JARS, start=1):
        url = jar_url(coordinate, repository)
        path = target / jar_name(coordinate)
        expected = _fetch(url + ".sha1").decode("ascii", "replace").split()[0].lower()
        step = f"[{number}/{len(DELTA_JARS)}] {coordinate}"
        if path.exists() and _sha1(path) == expected:
            progress(f"{step}: already there")
        else:
            data = _fetch(url)
            if hashlib.sha1(data, usedforsecurity=False).hexdigest() != expected:
                raise ConfigError(
                    f"{url} does not match its published SHA-1 ({expected}): the download "
                    "was altered on the way; try again, or from another --repository"
                )
            partial = path.with_name(path.name + ".part")
            partial.write_bytes(data)
            partial.replace(path)
            size = len(data)
            shown = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
            progress(f"{step}: {shown}, SHA-1 ok")
        paths.append(path)
    return paths

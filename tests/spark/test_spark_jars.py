"""The Delta Lake jars without Maven: ``pgwire-cdc jars DIR`` downloads the pinned jars from
Maven Central (each checked against its published SHA-1), and a Spark session given that
folder through ``$PGWIRE_CDC_DELTA_JARS`` writes and reads a Delta table; when Spark cannot
resolve ``spark.jars.packages`` at start, ``session(delta=True)`` says what to run instead
(a real Ivy failure: a repository nothing listens on). The list of jars matches
``deps/pom.xml``, and a tampered or unreachable repository is an error, not a jar."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pgwire_cdc import cli
from pgwire_cdc.spark import jars

ROOT = Path(__file__).resolve().parents[2]
POM = "{http://maven.apache.org/POM/4.0.0}"

#: A Spark program: a session with Delta Lake (``$PGWIRE_CDC_DELTA_JARS`` or Maven), a
#: Delta table written and read back; prints the rows and the jars it loaded as JSON.
DELTA_ROUND_TRIP = r"""
import json, sys
from pgwire_cdc.spark import session
spark = session("pgwire_cdc-jars", "local[1]", delta=True, **{"spark.ui.enabled": "false"})
spark.range(5).selectExpr("id", "id * 10 AS v").write.format("delta").save(sys.argv[1])
rows = sorted(tuple(r) for r in spark.read.format("delta").load(sys.argv[1]).collect())
history = spark.sql(f"DESCRIBE HISTORY delta.`{sys.argv[1]}`").count()
print(json.dumps({"rows": rows, "history": history, "jars": spark.conf.get("spark.jars", "")}))
spark.stop()
"""

#: An Ivy configuration whose only repository refuses every connection.
UNREACHABLE_IVY = """<ivysettings>
  <settings defaultResolver="nowhere"/>
  <resolvers>
    <ibiblio name="nowhere" m2compatible="true" root="http://127.0.0.1:9/maven2/"/>
  </resolvers>
</ivysettings>
"""


def run(
    args: list[str], env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}
    )


def test_the_pinned_jars_are_the_poms_delta_build() -> None:
    """deps/pom.xml (`make jars`) and the package pin the same delta-spark; the jars the
    package lists are the ones `make jars` copied, where it ran."""
    deps = ET.parse(ROOT / "deps" / "pom.xml").getroot().iter(f"{POM}dependency")
    coordinates = {
        ":".join(d.findtext(f"{POM}{part}", "") for part in ("groupId", "artifactId", "version"))
        for d in deps
    }
    delta_builds = {c for c in coordinates if c.startswith("io.delta:delta-spark_")}
    assert delta_builds == {jars.DELTA_SPARK_PACKAGE}
    assert jars.DELTA_JARS[0] == jars.DELTA_SPARK_PACKAGE
    assert len(set(jars.DELTA_JARS)) == len(jars.DELTA_JARS)
    copied = ROOT / ".cache" / "jars" / "delta"
    if copied.is_dir():
        missing = [c for c in jars.DELTA_JARS if not (copied / jars.jar_name(c)).exists()]
        assert missing == [], "`make jars` resolved other versions than the package pins"


@pytest.mark.java
def test_jars_then_a_session_writes_and_reads_delta(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    proc = run([sys.executable, "-m", "pgwire_cdc.cli", "jars", str(folder)], {})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum("SHA-1 ok" in line for line in lines) == len(jars.DELTA_JARS)
    assert lines[-1] == f"export PGWIRE_CDC_DELTA_JARS={folder.resolve()}"
    assert sorted(p.name for p in folder.iterdir()) == sorted(map(jars.jar_name, jars.DELTA_JARS))
    again = run([sys.executable, "-m", "pgwire_cdc.cli", "jars", str(folder)], {})
    assert again.returncode == 0 and again.stdout.count("already there") == len(jars.DELTA_JARS)

    table = tmp_path / "table"
    proc = run(
        [sys.executable, "-c", DELTA_ROUND_TRIP, str(table)],
        {"PGWIRE_CDC_DELTA_JARS": str(folder)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rows"] == [[i, i * 10] for i in range(5)]
    assert out["history"] == 1
    loaded = sorted(Path(j.removeprefix("file:")).name for j in out["jars"].split(","))
    assert loaded == sorted(map(jars.jar_name, jars.DELTA_JARS))


@pytest.mark.java
def test_a_failed_maven_resolution_says_to_run_the_jars_command(tmp_path: Path) -> None:
    settings = tmp_path / "ivysettings.xml"
    settings.write_text(UNREACHABLE_IVY)
    script = (
        "from pgwire_cdc.spark import session\n"
        "session('pgwire_cdc-no-maven', 'local[1]', delta=True, **{"
        f"'spark.jars.ivySettings': {str(settings)!r}, "
        f"'spark.jars.ivy': {str(tmp_path / 'ivy')!r}, 'spark.ui.enabled': 'false'}})\n"
    )
    proc = run([sys.executable, "-c", script], {"PGWIRE_CDC_DELTA_JARS": ""}, timeout=120)
    assert proc.returncode != 0
    assert "unresolved dependency" in proc.stderr  # Ivy's own account, left above
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("pgwire_cdc.errors.ConfigError: "), last
    assert jars.DELTA_SPARK_PACKAGE in last
    assert "`pgwire-cdc jars DIR`" in last and "export PGWIRE_CDC_DELTA_JARS=DIR" in last


def test_a_tampered_jar_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A repository (here a folder, file://) whose delta-spark does not match its .sha1."""
    repo = tmp_path / "repo"
    url = jars.jar_url(jars.DELTA_SPARK_PACKAGE, repo.as_uri())
    jar = Path(url.removeprefix("file://"))
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"not the jar")
    Path(f"{jar}.sha1").write_text(hashlib.sha1(b"the jar").hexdigest() + "\n")
    target = tmp_path / "jars"
    code = cli.main(["jars", str(target), "--repository", repo.as_uri()])
    assert code == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "does not match its published SHA-1" in err
    assert list(target.iterdir()) == []


def test_an_unreachable_repository_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["jars", str(tmp_path), "--repository", "http://127.0.0.1:9/maven2"])
    assert code == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "could not download http://127.0.0.1:9/maven2/io/delta/" in err

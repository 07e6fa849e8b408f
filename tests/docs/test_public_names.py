"""Every public name the README and docs/ show is there, where they show it (no server).

Two sources: the names listed here (the documented API, prose included), and every
``pgwire_cdc`` name the ``python`` code blocks of the README and docs/*.md use: ``from
pgwire_cdc... import ...`` and attribute paths such as ``pgwire_cdc.spark.session`` or
``delta.run`` after ``from pgwire_cdc import delta``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pgwire_cdc
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

DOCUMENTED = [
    *(f"pgwire_cdc.{name}" for name in pgwire_cdc.__all__),
    "pgwire_cdc.__version__",
    "pgwire_cdc.StreamOptions",
    "pgwire_cdc.Batch.ack",
    "pgwire_cdc.Batch.to_spark",
    "pgwire_cdc.Decoder",
    "pgwire_cdc.resnapshot",
    "pgwire_cdc.lsn_to_int",
    "pgwire_cdc.int_to_lsn",
    *(
        f"pgwire_cdc.errors.{name}"
        for name in (
            "Error",
            "DecodeError",
            "ColumnValueError",
            "ConfigError",
            "SlotError",
            "ConnectionError",
            "DeltaError",
            "IcebergError",
            "SpillError",
        )
    ),
    *(
        f"pgwire_cdc.delta.{name}"
        for name in (
            "run",
            "apply",
            "table_path",
            "merge_changes",
            "read_table",
            "DeltaSink",
            "ApplyStats",
            "Position",
            "position",
            "WRITERS",
            "APP_ID",
            "Writer",
            "DeltaRsWriter",
            "SparkWriter",
        )
    ),
    *(
        f"pgwire_cdc.iceberg.{name}"
        for name in (
            "run",
            "apply",
            "merge_changes",
            "maintain",
            "read_table",
            "position",
            "Position",
            "IcebergSink",
            "ApplyStats",
            "catalog_conf",
            "local_catalog",
            "local_catalog_conf",
            "table_ref",
            "DEFAULT_PROPERTIES",
        )
    ),
    *(
        f"pgwire_cdc.spark.{name}"
        for name in (
            "session",
            "register",
            "to_spark",
            "spark_schema",
            "spark_type",
            "for_spark",
            "DELTA_SPARK_PACKAGE",
            "DELTA_JARS_ENV",
            "ICEBERG_SPARK_PACKAGE",
            "ICEBERG_JARS_ENV",
        )
    ),
    "pgwire_cdc.spark.source.PgwireCdcDataSource",
    "pgwire_cdc.spark.source.SourceOptions",
    "pgwire_cdc.pipeline.Sink",
    "pgwire_cdc.pipeline.run",
    "pgwire_cdc.admin",
    "pgwire_cdc.catalog",
    "pgwire_cdc.cli.main",
    "pgwire_cdc.embedded.demo.run_demo",
    "pgwire_cdc.embedded.quickbench.run_bench",
]


def resolve(dotted: str) -> Any:
    """The object ``dotted`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[end:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def _code_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in PAGES:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S)):
            blocks.append((f"{page.relative_to(ROOT)}#{i + 1}", block))
    return blocks


def names_in(block: str) -> set[str]:
    """The pgwire_cdc names a code block uses."""
    found: set[str] = set()
    aliases = {"pgwire_cdc": "pgwire_cdc"}
    imports = r"^\s*from (pgwire_cdc[\w.]*) import (?:\(([^)]*)\)|([\w, ]+)$)"
    for module, wrapped, names in re.findall(imports, block, re.M):
        for name in re.split(r"[,\s]+", (wrapped or names).strip()):
            if name:
                found.add(f"{module}.{name}")
                aliases[name] = f"{module}.{name}"
    for module, alias in re.findall(r"^\s*import (pgwire_cdc[\w.]*)(?: as (\w+))?", block, re.M):
        found.add(module)
        aliases[alias or module] = module
    for alias, target in aliases.items():
        for rest in re.findall(rf"(?<![\w.]){re.escape(alias)}((?:\.\w+)+)", block):
            found.add(target + rest)
    return found


def test_the_pages_have_python_blocks_using_the_package() -> None:
    used = set().union(*(names_in(block) for _, block in _code_blocks()))
    assert {"pgwire_cdc.stream", "pgwire_cdc.delta.run", "pgwire_cdc.spark.session"} <= used


def test_names_in_finds_the_uses() -> None:
    block = (
        "from pgwire_cdc import delta\nimport pgwire_cdc\ndelta.run(x)\npgwire_cdc.spark.to_spark\n"
    )
    assert names_in(block) == {
        "pgwire_cdc",
        "pgwire_cdc.delta",
        "pgwire_cdc.delta.run",
        "pgwire_cdc.spark.to_spark",
    }


@pytest.mark.parametrize("name", DOCUMENTED)
def test_documented_name_exists(name: str) -> None:
    assert resolve(name) is not None


@pytest.mark.parametrize(("where", "block"), _code_blocks(), ids=[w for w, _ in _code_blocks()])
def test_names_of_the_code_blocks_exist(where: str, block: str) -> None:
    missing = []
    for name in sorted(names_in(block)):
        try:
            resolve(name)
        except (AttributeError, ModuleNotFoundError):
            missing.append(name)
    assert not missing, f"{where} uses names pgwire_cdc does not have: {missing}"


def test_the_spark_package_keeps_its_names_callable() -> None:
    """``pgwire_cdc.spark.session`` is the function (its module is ``spark.sessions``)."""
    from pgwire_cdc import delta, spark

    assert callable(spark.session) and callable(spark.register) and callable(spark.to_spark)
    assert callable(delta.run) and callable(delta.position) and callable(delta.apply)

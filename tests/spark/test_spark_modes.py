"""The list of tests that run on Spark Connect as well (``support/spark_modes.py``) names
tests that exist and take a Spark session, each with its reason (no server needed)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.spark_modes import ON_CONNECT, keep

TESTS = Path(__file__).resolve().parents[1]

#: The parameters through which a test gets a Spark session it can run on Connect.
SPARK_ARGUMENTS = {"spark", "spark_in", "lake", "iceberg_spark_in"}


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("test", sorted(ON_CONNECT))
def test_each_entry_names_a_test_that_takes_spark(test: str) -> None:
    file, name = test.split("::")
    path = TESTS / file
    assert path.is_file(), f"{test}: no {file} under tests/"
    function = _functions(path).get(name)
    assert function is not None, f"{test}: no function {name} in {file}"
    arguments = {a.arg for a in function.args.args}
    assert arguments & SPARK_ARGUMENTS, f"{test} takes no Spark session ({sorted(arguments)})"
    assert len(ON_CONNECT[test]) > 40, f"{test}: say why it runs on Spark Connect"


def test_connect_variants_run_only_where_listed_and_on_postgresql_18() -> None:
    listed = next(iter(ON_CONNECT))
    assert keep("spark/test_x.py::test_y", {"spark": "classic", "pg": "pg15"})
    assert not keep("spark/test_x.py::test_y", {"spark": "connect", "pg": "pg18"})
    assert not keep("delta/test_x.py::test_y", {"writer": "spark-connect", "pg": "pg18"})
    assert keep(listed, {"spark": "connect", "pg": "pg18"})
    assert keep(listed, {"lake": "connect", "pg": "pg18"})
    assert not keep(listed, {"spark": "connect", "pg": "pg15"})

"""The lists of test variants that run besides the default ones name tests that exist,
each with its reason (no server needed): on Spark Connect as well
(``support/spark_modes.py``: tests that take a Spark session), and on PostgreSQL 15 as
well past the decoder (``support/server_variants.py``: tests that take a server)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.server_variants import ON_PG15, PAST_THE_DECODER, keep_server
from support.spark_modes import ON_CONNECT, keep

TESTS = Path(__file__).resolve().parents[1]

#: The parameters through which a test gets a Spark session it can run on Connect.
SPARK_ARGUMENTS = {"spark", "spark_in", "lake", "iceberg_spark_in"}


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _arguments(test: str) -> set[str]:
    file, name = test.split("::")
    path = TESTS / file
    assert path.is_file(), f"{test}: no {file} under tests/"
    function = _functions(path).get(name)
    assert function is not None, f"{test}: no function {name} in {file}"
    return {a.arg for a in function.args.args}


@pytest.mark.parametrize("test", sorted(ON_CONNECT))
def test_each_entry_names_a_test_that_takes_spark(test: str) -> None:
    arguments = _arguments(test)
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


@pytest.mark.parametrize("test", sorted(ON_PG15))
def test_each_postgresql_15_entry_names_a_test_past_the_decoder_on_both_servers(
    test: str,
) -> None:
    assert test.split("/")[0] in PAST_THE_DECODER, f"{test} runs on both servers anyway"
    arguments = _arguments(test)
    assert arguments & {"pg", "db"}, f"{test} takes no PostgreSQL of the `pg` fixture"
    assert len(ON_PG15[test]) > 40, f"{test}: say why it runs on PostgreSQL 15"


def test_postgresql_15_variants_past_the_decoder_run_only_where_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGWIRE_CDC_BOTH_SERVERS", raising=False)
    listed = next(iter(ON_PG15))
    assert keep_server("decoder/test_x.py::test_y", {"pg": "pg15"})
    assert keep_server("delta/test_x.py::test_y", {"pg": "pg18"})
    assert not keep_server("delta/test_x.py::test_y", {"pg": "pg15"})
    assert not keep_server("docs/test_readme.py::test_block_runs", {"pg": "pg15", "block": 1})
    assert keep_server(listed, {"pg": "pg15"})
    monkeypatch.setenv("PGWIRE_CDC_BOTH_SERVERS", "1")
    assert keep_server("delta/test_x.py::test_y", {"pg": "pg15"})

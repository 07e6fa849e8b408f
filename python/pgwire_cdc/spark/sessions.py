"""Spark sessions set up for pgwire_cdc: :func:`session` (UTC, Arrow transfers, Delta
Lake's and Iceberg's jars on request) and :func:`register` (the ``pgwire_cdc`` data
source)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, cast

from ..errors import ConfigError
from .jars import DELTA_SPARK_PACKAGE, ICEBERG_JARS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: A directory of Delta Lake jars (``pgwire-cdc jars DIR`` fills one, ``make jars``
#: ``.cache/jars/delta``): used instead of resolving DELTA_SPARK_PACKAGE from Maven
#: Central at session start.
DELTA_JARS_ENV = "PGWIRE_CDC_DELTA_JARS"


#: A directory of Iceberg jars (``make jars`` fills ``.cache/jars/iceberg``): used instead
#: of resolving ICEBERG_JARS from Maven Central at session start.
ICEBERG_JARS_ENV = "PGWIRE_CDC_ICEBERG_JARS"

#: The static setting that sizes Spark's cache of generated classes, and the size
#: :func:`session` gives it (benches/results/spark_merge_cost.md).
CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries"
CODEGEN_CACHE_ENTRIES = "1000"

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def delta_jars() -> list[str]:
    """The jars of $PGWIRE_CDC_DELTA_JARS that Spark does not ship itself (Spark's own
    copies of Hadoop, Parquet, Jackson, Scala... win)."""
    return _jars_of(DELTA_JARS_ENV, "`pgwire-cdc jars {folder}`")


def iceberg_jars() -> list[str]:
    """The jars of $PGWIRE_CDC_ICEBERG_JARS (the Iceberg Spark runtime and the SQLite
    JDBC driver), less any Spark ships itself."""
    return _jars_of(ICEBERG_JARS_ENV, "`make jars`")


def _jars_of(env: str, fill: str) -> list[str]:
    import glob
    import os

    import pyspark

    folder = os.environ.get(env)
    if not folder:
        return []
    jars = sorted(glob.glob(os.path.join(folder, "*.jar")))
    if not jars:
        raise ConfigError(
            f"${env} is {folder!r} but holds no jars: fill it with "
            f"{fill.format(folder=folder)}, or unset it"
        )

    def artifact(path: str) -> str:
        return os.path.basename(path).rsplit("-", 1)[0]

    spark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar")
    shipped = {artifact(j) for j in glob.glob(spark_jars)}
    return [j for j in jars if artifact(j) not in shipped]


def session(
    app_name: str = "pgwire_cdc",
    master: str = "local[*]",
    delta: bool = False,
    remote: str | None = None,
    iceberg: bool = False,
    **conf: str,
) -> SparkSession:
    """A Spark session set up the way the hand-off expects: UTC session time zone and
    Arrow transfers on, and room for 1,000 generated classes in Spark's code cache
    (``spark.sql.codegen.cache.maxEntries``, 100 by default: too few for the Delta
    writer's MERGEs, which then compile code again each time). For a local master, or a
    standalone master on this machine (:func:`on_this_machine`), Spark's Python workers
    run this interpreter (``spark.pyspark.python``) unless ``$PYSPARK_PYTHON`` names one,
    so they import pgwire_cdc without an activated virtual environment; executors
    elsewhere need the package installed (docs/spark.md, "Running on a cluster").

    The ``pgwire_cdc`` data source is registered on it (:func:`register`).
    ``delta=True`` configures Delta Lake: the jars of ``$PGWIRE_CDC_DELTA_JARS`` when set
    (``pgwire-cdc jars DIR``), else ``spark.jars.packages`` resolves ``DELTA_SPARK_PACKAGE`` from
    Maven Central (a :class:`ConfigError` naming ``pgwire-cdc jars`` when that fails),
    plus Delta's SQL extension and catalog. ``iceberg=True`` likewise loads Iceberg's
    Spark runtime (``$PGWIRE_CDC_ICEBERG_JARS``, else ``spark.jars.packages``) and its SQL
    extension; the Iceberg catalogs themselves are settings of their own
    (:func:`pgwire_cdc.iceberg.catalog_conf`), which may be passed here or set on the
    session later, before the catalog is first used. Extra ``conf`` entries
    (``**{"spark.key": "value"}``) are passed through.

    ``remote="sc://host:port"`` (or ``$SPARK_REMOTE``) returns a Spark Connect session
    instead, set up the same way where a client can (:func:`connect_session`)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    remote = remote or os.environ.get("SPARK_REMOTE")
    if remote:
        return connect_session(remote, app_name, delta=delta, iceberg=iceberg, **conf)

    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Spark keeps the classes it generates for queries, 100 by default: fewer than one
        # MERGE of the Delta writer uses (some 110 with Delta 4.4), and with 100 every
        # MERGE compiles about 25 of them again (a quarter second of CPU on 2 cores).
        .config(CODEGEN_CACHE, CODEGEN_CACHE_ENTRIES)
    )
    if master.startswith("local") or on_this_machine(master):
        # PySpark reads the variable (RDD functions) and the JVM the setting (SQL UDFs,
        # data sources); a choice the user made already stays. A standalone master on
        # this machine: its executors can run this interpreter too.
        python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.pyspark.python", python).config(
            "spark.pyspark.driver.python", os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable)
        )
    if master.startswith("local"):
        # One machine: a few shuffle partitions, not 200 (nor Delta's 50 for its log).
        builder = builder.config("spark.sql.shuffle.partitions", "4")
        builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
    resolves = False
    jars: list[str] = []
    packages: list[str] = []
    extensions: list[str] = []
    if delta:
        found = delta_jars()
        resolves = not found
        jars += found
        packages += [] if found else [DELTA_SPARK_PACKAGE]
        extensions.append(DELTA_EXTENSION)
        builder = builder.config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    if iceberg:
        found = iceberg_jars()
        jars += found
        packages += [] if found else list(ICEBERG_JARS)
        extensions.append(ICEBERG_EXTENSION)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if packages:
        builder = builder.config("spark.jars.packages", ",".join(packages))
    if extensions:
        builder = builder.config("spark.sql.extensions", ",".join(extensions))
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as e:
        if resolves and getattr(e, "getCondition", lambda: None)() == "JAVA_GATEWAY_EXITED":
            raise ConfigError(
                f"Spark did not start while resolving Delta Lake ({DELTA_SPARK_PACKAGE}, "
                "through spark.jars.packages from Maven Central; Ivy's messages above say "
                "why). Download the jars once instead: `pgwire-cdc jars DIR`, then "
                f"`export {DELTA_JARS_ENV}=DIR`"
            ) from e
        raise
    register(spark)
    return spark


#: What spark-submit names the application when no ``--name`` is given: the driver
#: script's file name (:mod:`pgwire_cdc.spark.submit`).
_SUBMIT_SCRIPT = "submit.py"


def in_spark_job() -> bool:
    """Whether this process is the driver of a Spark job set up by someone else:
    spark-submit (or the pyspark shell) started it and hands it its JVM
    (``$PYSPARK_GATEWAY_PORT``: the master, jars and settings of the command line), or a
    classic Spark session is active in it already. :func:`job_session` is then its
    session; :func:`session` would start one of its own, with a master of its own."""
    import os

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return True
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None


def job_session(
    app_name: str = "pgwire_cdc", delta: bool = False, iceberg: bool = False, **conf: str
) -> SparkSession:
    """The session of the Spark job this process is the driver of (:func:`in_spark_job`):
    the active session, else one made on the JVM spark-submit started, with the master,
    jars and settings of its command line (docs/pipelines.md, "As a Spark job").

    A running JVM takes no more jars: with ``delta=True`` (``iceberg=True``) Delta Lake's
    (Iceberg's) classes come from spark-submit's ``--jars`` or ``--packages``, else a
    :class:`ConfigError` names them. A session made here gets their SQL extensions
    (appended to the command line's ``spark.sql.extensions``) and, with ``delta=True``,
    Delta's catalog as ``spark_catalog`` unless the command line names one; an active
    session must have them already (static settings: a :class:`ConfigError` names the
    ``--conf``). What :func:`session` sets besides (UTC, Arrow transfers, the code cache;
    a local or same-machine master's Python workers running this interpreter and few
    shuffle partitions) is set where the command line leaves it unset; ``conf`` (an
    Iceberg catalog's settings, say) over the command line's."""
    import os
    import sys

    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    wanted = [name for name, on in (("delta", delta), ("iceberg", iceberg)) if on]
    active = SparkSession.getActiveSession()
    if active is not None:
        extensions = active.conf.get("spark.sql.extensions", "") or ""
        for name in wanted:
            if _EXTENSIONS[name] not in extensions:
                raise ConfigError(
                    f"the Spark session of this job has no {_LAKES[name]}: start the job with "
                    + _needs(name, jars=False)
                )
        for key, value in {**_session_settings(), **conf}.items():
            active.conf.set(key, value)
        register(active)
        return active

    SparkContext._ensure_initialized()  # joins spark-submit's JVM
    submitted = dict(SparkConf().getAll())
    for name in wanted:
        if not _loads(_EXTENSIONS[name]):
            raise ConfigError(
                f"this Spark job has no {_LAKES[name]} jars: run spark-submit with "
                + _needs(name, jars=True)
            )
    builder = SparkSession.builder
    if submitted.get("spark.app.name", _SUBMIT_SCRIPT) == _SUBMIT_SCRIPT:
        builder = builder.appName(app_name)
    defaults = {**_session_settings(), CODEGEN_CACHE: CODEGEN_CACHE_ENTRIES}
    master = submitted.get("spark.master", "")
    if master.startswith("local") or on_this_machine(master):
        # As session(): the workers run this interpreter, which imports pgwire_cdc.
        if "spark.pyspark.python" not in submitted:
            defaults["spark.pyspark.python"] = os.environ.setdefault(
                "PYSPARK_PYTHON", sys.executable
            )
    if master.startswith("local"):
        defaults["spark.sql.shuffle.partitions"] = "4"
        defaults["spark.databricks.delta.snapshotPartitions"] = "2"
    if delta:
        defaults["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    for key, value in defaults.items():
        if key not in submitted:
            builder = builder.config(key, value)
    listed = [e.strip() for e in submitted.get("spark.sql.extensions", "").split(",")]
    listed = [e for e in listed if e]
    listed += [_EXTENSIONS[n] for n in wanted if _EXTENSIONS[n] not in listed]
    if listed:
        builder = builder.config("spark.sql.extensions", ",".join(listed))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


_LAKES = {"delta": "Delta Lake", "iceberg": "Iceberg"}
_EXTENSIONS = {"delta": DELTA_EXTENSION, "iceberg": ICEBERG_EXTENSION}


def _session_settings() -> dict[str, str]:
    """The session settings :func:`session` sets and a running session takes."""
    return {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def _needs(name: str, jars: bool) -> str:
    """The spark-submit options that give a job Delta Lake or Iceberg."""
    if name == "delta":
        given = (
            f"--packages {DELTA_SPARK_PACKAGE} (or --jars with the jars of `pgwire-cdc jars DIR`)"
        )
        confs = (
            f"--conf spark.sql.extensions={DELTA_EXTENSION} "
            f"--conf spark.sql.catalog.spark_catalog={DELTA_CATALOG}"
        )
    else:
        given = f"--packages {','.join(ICEBERG_JARS)} (or --jars with those jars)"
        confs = f"--conf spark.sql.extensions={ICEBERG_EXTENSION}"
    return given if jars else f"{given} and {confs}"


def _loads(name: str) -> bool:
    """Whether the JVM this process joined loads the class ``name`` (the jars of
    spark-submit's ``--jars`` and ``--packages`` are on its class path)."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None
    try:
        jvm.org.apache.spark.util.Utils.classForName(name, False, False)
    except Exception:  # py4j's error for the JVM's ClassNotFoundException
        return False
    return True


def on_this_machine(master: str) -> bool:
    """Whether ``master`` is a standalone master (``spark://host:port``, or several
    comma-separated) running on this machine: each host a loopback address or an address
    of this host."""
    import ipaddress
    import socket

    if not master.startswith("spark://"):
        return False

    def addresses(host: str) -> set[str]:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None)}

    try:
        here = addresses(socket.gethostname())
        for part in master.removeprefix("spark://").split(","):
            host = part.rsplit(":", 1)[0].strip("[]")
            if not all(ipaddress.ip_address(a).is_loopback or a in here for a in addresses(host)):
                return False
    except (OSError, ValueError):
        return False
    return True


def missing_package_error(error: BaseException) -> ConfigError | None:
    """What to do when Spark failed because one of its Python workers cannot import
    pgwire_cdc (``ModuleNotFoundError`` from the driver's planner, or from an executor's
    task); None for any other error."""
    text = str(error)
    if "No module named 'pgwire_cdc'" not in text:
        return None
    where = (
        "the driver's planner (spark.pyspark.python, else $PYSPARK_PYTHON, else python3)"
        if "PYTHON_DATA_SOURCE_ERROR" in text
        else "the executors"
    )
    return ConfigError(
        f"Spark's Python workers cannot import pgwire_cdc: {where} run a Python without it. "
        "Point spark.pyspark.python at a Python that has the pgwire-cdc wheel on every "
        "machine (session() does for a local master and a standalone master on this "
        "machine), or ship a packed environment (docs/spark.md, 'Running on a cluster')"
    )


def register(spark: SparkSession) -> None:
    """Makes ``format("pgwire_cdc")`` resolve on ``spark`` (classic or Spark Connect):
    ``spark.read`` (a table read by Spark tasks under one snapshot,
    :mod:`pgwire_cdc.spark.snapshot`) and ``spark.readStream`` (changes):
    :mod:`pgwire_cdc.spark.source`.

    Spark usually finds the source by itself (the top-level ``pyspark_pgwire_cdc``
    module), but it looks for it with the Python of ``$PYSPARK_DRIVER_PYTHON``, else
    ``$PYSPARK_PYTHON``, else ``python3`` on the ``PATH`` — not ``spark.pyspark.python``: a
    session whose builder names the Python while the process has neither variable nor an
    activated virtual environment finds nothing (``DATA_SOURCE_NOT_FOUND``). So the source
    is registered here only where Spark did not find it (a registration over Spark's own
    logs a warning that it replaced it), for the Python the session names
    (:func:`_register_source`), and the package's entry points that read through it call
    this on the session they are given. Checked once per session object
    (:func:`source_found`: no Python worker, no job)."""
    if spark in _REGISTERED:
        return
    if not source_found(spark):
        _register_source(spark)
    _REGISTERED.add(spark)


def _register_source(spark: SparkSession) -> None:
    """Registers the data source on ``spark``. A classic session starts the Python
    workers of a registered source (the driver's planner, the executors' readers) with
    the interpreter PySpark took from ``$PYSPARK_PYTHON`` when the SparkContext started
    (else ``python3``), even where the session names its own in ``spark.pyspark.python``
    (Spark's Python for the driver and the executors): the source is registered with
    that one. A Spark Connect server picks its own."""
    from .source import PgwireCdcDataSource

    if is_connect(spark):
        spark.dataSource.register(PgwireCdcDataSource)
        return
    context = spark.sparkContext
    python = context.getConf().get("spark.pyspark.python")
    default = context.pythonExec
    if python:
        context.pythonExec = python
    try:
        spark.dataSource.register(PgwireCdcDataSource)
    finally:
        context.pythonExec = default


#: The sessions :func:`register` has seen to, held weakly: a stopped session is dropped.
_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def source_found(spark: SparkSession, name: str = "pgwire_cdc") -> bool:
    """Whether ``format(name)`` resolves on ``spark``: a data source Spark found or one
    registered. Analyses a read given a schema of its own, which Spark resolves without
    starting a Python worker (and a Spark Connect client with one analysis request)."""
    try:
        spark.read.format(name).schema("found int").load().schema  # noqa: B018
    except Exception as e:
        condition = _condition(e)
        if condition is None:
            raise
        # Found, then refused for a reason of its own (a read says what), or not found.
        return condition != "DATA_SOURCE_NOT_FOUND"
    return True


def _condition(error: BaseException) -> str | None:
    """The error condition of a Spark error (``DATA_SOURCE_NOT_FOUND``, ...); None for
    any other error. A classic session raises some Spark errors as py4j's Java error,
    with the JVM's exception in ``java_exception``."""
    get = getattr(error, "getCondition", None)
    if callable(get):
        return str(get())
    java = getattr(error, "java_exception", None)
    if java is None:
        return None
    try:
        return str(java.getCondition())
    except Exception:  # not a SparkThrowable
        return None


def connect_session(
    remote: str,
    app_name: str = "pgwire_cdc",
    delta: bool = False,
    iceberg: bool = False,
    **conf: str,
) -> SparkSession:
    """A Spark Connect session to ``remote`` (``sc://host:port``) set up as :func:`session`
    sets up a classic one, where a client can: UTC session time zone and Arrow transfers
    (session settings); the server's jars, SQL extensions, Python and static settings
    (the code cache's size: start the server with ``spark.sql.codegen.cache.maxEntries``
    of 1,000 for the Delta writer) are the server's own.

    Checked at once, so that a misconfigured server fails here rather than in the middle
    of a pipeline (:func:`check_server`): the server's Python workers import pgwire_cdc in
    the client's Python minor version (data sources and ``foreachBatch`` functions travel
    pickled by reference), and with ``delta=True`` the server has Delta Lake's SQL
    extension."""
    import os

    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # What `SparkSession.builder.remote(...)` does, less its refusal when this process
    # also runs a classic session: PySpark's functions follow this variable.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    builder = ConnectSession.builder.remote(remote).appName(app_name)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **conf,
    }
    # The Connect session is not a subclass of the classic one; it has the same API less
    # the JVM-only parts, which nothing in this package uses.
    spark = cast("SparkSession", builder.getOrCreate())
    for key, value in settings.items():
        spark.conf.set(key, value)
    check_server(spark, delta=delta, iceberg=iceberg)
    register(spark)
    return spark


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (it is not a subclass of the classic
    one, and has no ``sparkContext``)."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # the client extras (grpcio, ...) are not installed
        return False
    return isinstance(spark, ConnectSession)


def check_server(spark: SparkSession, delta: bool = False, iceberg: bool = False) -> None:
    """Raises :class:`ConfigError` with what to do when the Spark server behind ``spark``
    cannot run pgwire_cdc's Python code: its Python workers must import pgwire_cdc, in the
    same Python minor version as this process; with ``delta=True``, it must have Delta
    Lake's SQL extension, with ``iceberg=True`` Iceberg's. Runs one one-row job."""
    import sys

    from pyspark.errors import PySparkException
    from pyspark.sql.functions import udf

    here = "{}.{}".format(*sys.version_info[:2])
    try:
        (row,) = spark.range(1).select(udf(_server_python, "string")().alias("v")).collect()
    except PySparkException as e:
        text = str(e)
        if "PYTHON_VERSION_MISMATCH" in text or "Python in worker has different version" in text:
            raise ConfigError(
                f"the Spark server's Python workers run another Python version than this "
                f"client ({here}); Python data sources and foreachBatch functions need the "
                "same minor version on both sides: point the server's spark.pyspark.python "
                f"(or PYSPARK_PYTHON) at a Python {here} with pgwire_cdc installed, or run "
                "this client under the server's version"
            ) from None
        if "pgwire_cdc" in text and ("ModuleNotFoundError" in text or "No module named" in text):
            raise ConfigError(
                "the Spark server's Python workers cannot import pgwire_cdc: install the "
                "pgwire-cdc wheel into the Python they run (spark.pyspark.python), or ship a "
                "packed environment (docs/spark.md, 'Running on a cluster')"
            ) from None
        raise
    if row["v"] != here:
        raise ConfigError(
            f"the Spark server's Python workers run Python {row['v']}, this client {here}: "
            "Python data sources and foreachBatch functions need the same minor version"
        )
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if iceberg and ICEBERG_EXTENSION not in extensions:
        raise ConfigError(
            "the Spark server has no Iceberg: start it with the Iceberg runtime (`--jars` "
            "from `make jars`, or `--packages " + ",".join(ICEBERG_JARS) + "`) and --conf "
            f"spark.sql.extensions={ICEBERG_EXTENSION}"
        )
    if delta:
        if "DeltaSparkSessionExtension" not in extensions:
            raise ConfigError(
                "the Spark server has no Delta Lake: start it with the Delta jars (`--packages "
                f"{DELTA_SPARK_PACKAGE}` or `--jars` from `make jars`) and --conf "
                "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension --conf "
                "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"
            )


def _server_python() -> str:
    """Run by a server's Python worker: its Python minor version (importing this module
    there proves pgwire_cdc is installed)."""
    import sys

    return "{}.{}".format(*sys.version_info[:2])


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks Spark runs a leaf scan in by default (``defaultParallelism``: the
    cores of the cluster, or ``spark.default.parallelism``), on classic and Connect
    sessions alike: the partition count of a ``range`` without one, which Spark sizes by
    that number (a Connect client has no ``sparkContext`` to ask)."""
    from pyspark.sql import functions as F

    (row,) = (
        spark.range(0, 1 << 16)
        .select(F.spark_partition_id().alias("p"))
        .agg(F.max("p").alias("last"))
        .collect()
    )
    return int(row["last"]) + 1

"""The driver script of a pipeline file run as a Spark job. spark-submit runs a Python
file, not a module (no ``-m``), so it is given this one::

    spark-submit --master spark://host:7077 --packages io.delta:delta-spark_4.1_2.13:4.4.0 \\
        "$(python -m pgwire_cdc.spark.submit)" run PIPELINE.toml

Given arguments, it is the ``pgwire-cdc`` command line: ``run`` then writes through the
job's Spark session, with spark-submit's master, jars and settings
(:func:`pgwire_cdc.spark.sessions.job_session`; docs/pipelines.md, "As a Spark job").
Without arguments it prints its own path, for the command above.
"""

import os
import sys

if __name__ == "__main__":
    # Run as a file, Python puts this folder first on the path, where its modules would
    # shadow others of the same name (the standard library's types, say).
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    if len(sys.argv) < 2:
        print(os.path.abspath(__file__))
        sys.exit(0)
    try:
        from pgwire_cdc.cli import main
    except ModuleNotFoundError as e:
        if e.name != "pgwire_cdc":
            raise
        sys.exit(
            f"spark-submit ran {sys.executable}, which cannot import pgwire_cdc: point "
            "PYSPARK_PYTHON (or spark.pyspark.driver.python) at the Python that has it"
        )
    sys.exit(main(sys.argv[1:]))

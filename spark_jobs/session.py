"""A SparkSession for the txbroker jobs, with the ``txbroker`` data source registered."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from .source import TxBrokerDataSource

_LOG4J = Path(__file__).with_name("log4j2.properties")


def spark_session(app_name: str = "txbroker", master: str | None = None,
                  log_level: str = "ERROR") -> SparkSession:
    """``local[2]`` unless a master is given or configured (spark-submit --master ...).

    Python workers run the interpreter of this process: without that they start the
    system ``python3``, which lacks pyarrow and this package."""
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ.setdefault(var, sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Not under spark-submit (which starts the JVM first and hands this process its
        # port): run locally on two cores. Under spark-submit its --master applies.
        builder = builder.master("local[2]")
    if "PYSPARK_GATEWAY_PORT" not in os.environ and _LOG4J.exists():
        # This process starts the JVM, so it can choose its logging: quiet start-up.
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile=file:{_LOG4J}")
    spark = (
        builder
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Dates derived from record timestamps (the ingest job's partition column) must
        # not depend on the machine's time zone.
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(log_level)
    spark.dataSource.register(TxBrokerDataSource)
    return spark


"""A SparkSession for the txbroker jobs, with the ``txbroker`` data source registered."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from .source import TxBrokerDataSource

_LOG4J = Path(__file__).with_name("log4j2.properties")
# Where `make spark-kafka-jars` puts Spark's Kafka connector (a source checkout only);
# the environment variable points elsewhere (a folder of jars) for other installs.
CONNECTOR_JARS_ENV = "TXBROKER_SPARK_KAFKA_JARS"
_JVM_DIR = Path(__file__).resolve().parent.parent / ".jvm"


def connector_version() -> str:
    """The connector version `make` fetches (spark_jobs/connector/pom.xml), else pyspark's:
    they differ while Maven Central lacks the connector of pyspark's version."""
    pom = Path(__file__).with_name("connector") / "pom.xml"
    if pom.exists():
        found = re.search(r"<spark\.version>([^<]+)</spark\.version>", pom.read_text())
        if found:
            return found.group(1)
    from pyspark import __version__

    return __version__


def connector_jars() -> list[str]:
    """The jars of Spark's Kafka connector (``format("kafka")``), or [] if none were fetched.

    A fetch counts once its stamp exists (``make`` writes it last); with several
    versions fetched, the newest."""
    given = os.environ.get(CONNECTOR_JARS_ENV)
    if given:
        folder = Path(given)
    else:
        fetched = sorted((p.parent for p in _JVM_DIR.glob("spark-kafka-*/.complete")),
                         key=lambda d: [int(x) if x.isdigit() else 0
                                        for x in d.name.removeprefix("spark-kafka-").split(".")])
        if not fetched:
            return []
        folder = fetched[-1]
    return sorted(str(j) for j in folder.glob("*.jar"))


def spark_session(app_name: str = "txbroker", master: str | None = None,
                  log_level: str = "ERROR", kafka_connector: bool = True) -> SparkSession:
    """``local[2]`` unless a master is given or configured (spark-submit --master ...).

    With ``kafka_connector`` (the default) Spark's Kafka connector is on the classpath
    when ``make spark-kafka-jars`` fetched it, so ``format("kafka")`` works too.

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
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # This process starts the JVM, so it chooses its logging (quiet start-up) and
        # its classpath. Under spark-submit, pass the connector with --jars/--packages.
        if _LOG4J.exists():
            builder = builder.config("spark.driver.extraJavaOptions",
                                     f"-Dlog4j2.configurationFile=file:{_LOG4J}")
        jars = connector_jars() if kafka_connector else []
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
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


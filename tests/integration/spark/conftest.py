import os

import pytest

from tests.integration.spark_util import shared_spark


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession shared by every Spark test (start-up costs seconds)."""
    session = shared_spark()
    yield session
    session.stop()


def connector_missing() -> str | None:
    """Why Spark's Kafka connector cannot run here, or None."""
    from txbroker.spark_jobs.session import connector_jars

    if connector_jars():
        return None
    why = "Spark's Kafka connector was not fetched: run `make spark-kafka-jars`"
    if os.environ.get("CI"):
        pytest.fail(why)  # CI ran make, which fetches it: its absence is a bug
    return why


@pytest.fixture(params=["txbroker", "kafka"])
def source(request) -> str:
    """The Spark source under test: this package's ``txbroker`` or Spark's own ``kafka``
    connector (both against txbroker here). Same options, same guarantees."""
    if request.param == "kafka":
        why = connector_missing()
        if why:
            pytest.skip(why)
    return request.param

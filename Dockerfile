# Two images from one file (docker-compose.yml builds both):
#   target "spark":  Java 17 + PySpark + txbroker's spark_jobs, runs the ingestion job
#   target "broker" (the default, last stage): the broker alone, data in /data
FROM python:3.11-slim-bookworm AS source
WORKDIR /opt/txbroker
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY client ./client
COPY storage ./storage
COPY coordinator ./coordinator
COPY broker ./broker
COPY tools ./tools
COPY testing ./testing
COPY spark_jobs ./spark_jobs
COPY txbroker ./txbroker

FROM source AS spark
# Spark needs a JVM; procps because Spark's launcher scripts call ps.
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir '.[spark]' \
    && useradd --system --create-home spark && mkdir -p /output /checkpoint \
    && chown spark /output /checkpoint
USER spark
ENV PYSPARK_PYTHON=python3 PYSPARK_DRIVER_PYTHON=python3
ENTRYPOINT ["python", "-m", "txbroker.spark_jobs.ingest"]

FROM source AS broker
RUN pip install --no-cache-dir . && useradd --system --home /data txbroker \
    && mkdir -p /data && chown txbroker /data
USER txbroker
VOLUME /data
EXPOSE 9092
# Config keys can also come from TXBROKER_* environment variables (docs/configuration.md).
ENTRYPOINT ["txbroker", "serve", "--data-dir", "/data"]
CMD ["--host", "0.0.0.0", "--port", "9092"]

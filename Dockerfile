# txbroker: a single Kafka-compatible broker, data in /data.
FROM python:3.11-slim-bookworm
WORKDIR /opt/txbroker
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY storage ./storage
COPY coordinator ./coordinator
COPY broker ./broker
COPY spark_jobs ./spark_jobs
RUN pip install --no-cache-dir . && useradd --system --home /data txbroker \
    && mkdir -p /data && chown txbroker /data
USER txbroker
VOLUME /data
EXPOSE 9092
# Config keys can also come from TXBROKER_* environment variables (docs/configuration.md).
ENTRYPOINT ["txbroker", "serve", "--data-dir", "/data"]
CMD ["--host", "0.0.0.0", "--port", "9092"]

"""A sample exactly-once payments pipeline to ingest with Spark (``make demo``).

- ``orders.py``: deterministic payment orders, validation and enrichment, the ledger;
- ``generator.py``: produces the orders to ``orders`` (idempotent producer);
- ``processor.py``: consume-transform-produce in Kafka transactions, with deliberate
  aborts and a crash (run as a process);
- ``journal.py``: the processor's side file of committed / aborted attempts;
- ``pipeline.py``: generator → processor → crash → restarted processor;
- ``verify.py``: a Spark job over the ingested Parquet proving the result.
"""

"""An in-process broker on an ephemeral port, for tests (ours and users').

    with BrokerThread(data_dir) as broker:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)

The broker runs its own event loop in a background thread, so synchronous
clients and asyncio clients (on their own loop) can both talk to it.

A secured broker: ``BrokerThread(data_dir, listeners=["PLAINTEXT", "SASL_SSL"],
users={"alice": "alice-secret"})``; then ``bootstrap_for("SASL_SSL")``,
``client_config("SASL_SSL", "alice")`` and ``certs`` (CA and client certificate files)
give a client what it needs (testing/security.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Mapping, Sequence

from txbroker.broker.config import load_config
from txbroker.broker.server import Broker

from .faults import BrokerFaults
from .security import SecuredBrokerAccess, SecuritySetup
from .thread_safe_ast import serialize_ast_parse

# The broker's thread imports modules lazily while the caller's thread runs tests.
serialize_ast_parse()


class BrokerThread(SecuredBrokerAccess):
    def __init__(self, data_dir: str, overrides: Mapping[str, str] | None = None,
                 host: str = "127.0.0.1", port: int = 0, *,
                 listeners: Sequence[str] | Mapping[str, str] | None = None,
                 users: Mapping[str, str] | None = None, **security) -> None:
        """``listeners`` (names, or name -> security protocol) and ``users`` start a
        secured broker; ``security`` passes SecuritySetup's options (ssl_client_auth,
        sasl_mechanisms, principal_mapping_rules)."""
        self.security = (SecuritySetup(data_dir, listeners, users, host=host, **security)
                         if listeners is not None else None)
        if self.security is not None:
            overrides = {**self.security.overrides(), **(overrides or {})}
            self.security.prepare_data_dir()
        self.config = load_config(host=host, port=port, data_dir=data_dir,
                                  overrides=dict(overrides or {}), environ={})
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def host(self) -> str:
        assert self.broker is not None
        return self.broker.advertised_host_port[0]

    @property
    def port(self) -> int:
        assert self.broker is not None
        return self.broker.port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        """host:port of one listener (by name)."""
        assert self.broker is not None
        host, port = self.broker.advertised_for(listener)
        return f"{host}:{self.broker.listeners_by_name[listener].port}"

    def sessions(self) -> list[tuple[str, str, str]]:
        """(peer, listener, principal) of every open connection: which principal the
        broker assigned (ACL tests check it)."""
        return self.call(lambda b: sorted((c.session.peer, c.session.listener_name,
                                           c.session.principal) for c in b._connections))

    def start(self) -> BrokerThread:
        ready: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def main() -> None:
                self._stopped = asyncio.Event()
                self.broker = Broker(self.config, in_process=True)
                try:
                    await self.broker.start()
                except BaseException as e:
                    ready.set_exception(e)
                    return
                ready.set_result(None)
                await self._stopped.wait()
                await self.broker.stop()

            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="txbroker", daemon=True)
        self._thread.start()
        ready.result(timeout=60)
        return self

    def call(self, fn, *args):
        """Run ``fn(broker, *args)`` on the broker's loop and return its result."""
        assert self._loop is not None

        async def invoke():
            result = fn(self.broker, *args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(timeout=60)

    def create_topic(self, name: str, partitions: int = 1,
                     configs: Mapping[str, str] | None = None, *, exist_ok: bool = False):
        """Create a topic (TOPIC_ALREADY_EXISTS if it exists, unless ``exist_ok``: then the
        existing topic is kept as it is, its partitions and configs not compared)."""

        def create(broker):
            if exist_ok and name in broker.logs.topics:
                return broker.logs.topics[name]
            return broker.logs.create_topic(name, partitions, dict(configs or {}))

        return self.call(create)

    def _partition(self, broker, topic: str, partition: int):
        plog = broker.logs.get_log(topic, partition)
        if plog is None:
            raise KeyError(f"no partition {topic}-{partition}")
        return plog

    def high_watermark(self, topic: str, partition: int = 0) -> int:
        """The partition's high watermark: the offset after the last record a
        read_uncommitted consumer can read (on one broker, the log end offset)."""
        return self.call(lambda b: self._partition(b, topic, partition).high_watermark)

    def last_stable_offset(self, topic: str, partition: int = 0) -> int:
        """The partition's last stable offset: where read_committed consumers stop (the
        first offset of its oldest open transaction, else the high watermark)."""
        return self.call(lambda b: self._partition(b, topic, partition).last_stable_offset)

    def log_start_offset(self, topic: str, partition: int = 0) -> int:
        """The partition's first offset still in the log (moves with retention)."""
        return self.call(lambda b: self._partition(b, topic, partition).log_start_offset)

    @property
    def faults(self) -> BrokerFaults:
        """Install faults (docs/fault-injection.md): ``txbroker.faults.add(api="Produce",
        error="NOT_LEADER_OR_FOLLOWER", count=3)``, ``txbroker.faults.arm("before_complete",
        "crash")``; each call runs on the broker's loop."""
        assert self.broker is not None
        return BrokerFaults(self.call)

    @property
    def crashed(self) -> bool:
        return self.broker is not None and self.broker.crashed

    def expire_transactions(self, transactional_id: str | None = None, *, wait: bool = True,
                            timeout: float = 10.0) -> list[str]:
        """Expire every ongoing transaction (or the one of ``transactional_id``) now, as
        its transaction.timeout.ms would: aborted with an epoch bump, so its producer is
        fenced (its next request fails with PRODUCER_FENCED / INVALID_PRODUCER_EPOCH).
        Later timeouts are not disturbed. With ``wait``, returns once the aborts are
        complete (ABORT markers written: read_committed consumers move on). Returns the
        transactional ids that were expired."""

        async def expire(broker):
            tids = broker.transactions.expire_transactions_now(transactional_id)
            if wait and not await broker.transactions.wait_settled(tids, timeout):
                raise TimeoutError(f"expired transactions of {tids} not aborted in {timeout}s")
            return tids

        return self.call(expire)

    def wait_crashed(self, timeout: float = 10.0) -> None:
        """Wait until a crash fault has fired and the crashed broker has let go of its
        files (so they can be inspected as the crash left them); then ``restart()``."""
        deadline = time.monotonic() + timeout
        while not self.crashed:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker did not crash within {timeout}s")
            time.sleep(0.02)
        self.call(lambda broker: broker.stop())  # after a crash: waits for its teardown

    def crash(self, *, power_loss: bool = False, torn_seed: int | None = None) -> None:
        """Crash the broker now, as a ``crash`` fault point would (or ``power_loss``: what
        was not fsynced is lost too; with ``torn_seed`` the disk tears it instead: random
        4 KiB pages of it persist and checkpoints or snapshots may be half-written, the
        same seed tearing the same way); then ``restart()``."""

        async def crash(broker):
            broker.crash("crash()", power_loss, None if not power_loss else torn_seed)
            await broker.stop()  # waits for the crash's teardown

        self.call(crash)

    def restart(self) -> BrokerThread:
        """Stop (or, after a crash fault, clean up) and start again on the same data
        directory and port; clients reconnect as they would to a restarted Kafka broker.
        Fault points that have not fired stay armed; those that fired do not come back.
        Request and connection faults stay installed, with their counts."""
        assert self.broker is not None
        bound = ",".join(f"{lst.name}://{lst.spec.host}:{lst.port}" for lst in self.broker.listeners)
        self.config.set("txbroker.fault.points", self.broker.faults.config_text(), "restart")
        kept = self.broker.faults.active()  # with those from txbroker.faults, counts kept
        self.config.set("txbroker.faults", "", "restart")
        self.stop()
        self.config.set("listeners", bound, "restart")
        self.start()
        self.call(lambda broker: broker.faults.adopt(kept))
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            if self._thread.is_alive():
                try:
                    self._loop.call_soon_threadsafe(self._stopped.set)
                except RuntimeError:  # the loop closed meanwhile (a start that failed ends
                    pass              # its thread by itself): nothing left to stop
                self._thread.join(timeout=60)
        self._thread = None

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

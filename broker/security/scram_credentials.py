"""SCRAM credentials, durable in the data directory (``scram-credentials.json``).

What Kafka keeps in its metadata log as UserScramCredentialRecord: per user and
mechanism the salt, stored key, server key and iterations, never the password. Every
change rewrites the file atomically (temporary file, fsync, rename, fsync of the
directory) before it is acknowledged, so it survives SIGKILL and power loss.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from typing import TYPE_CHECKING

from txbroker.storage.durable_file import write_durably

if TYPE_CHECKING:
    from collections.abc import Iterable

    from txbroker.protocol import scram

log = logging.getLogger(__name__)

CREDENTIALS_FILE = "scram-credentials.json"
# AlterUserScramCredentials' mechanism numbers (Kafka's ScramMechanism.type()).
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_NUMBERS = {name: number for number, name in MECHANISM_TYPES.items()}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class ScramCredentialStore:
    """Every broker opens the store at start; the SCRAM code (protocol/scram.py, ~5 ms
    of imports) is loaded only when there are credentials to read or to write."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, CREDENTIALS_FILE)
        self._users: dict[str, dict[str, scram.ScramCredential]] = {}
        self._lock = threading.Lock()  # writers may run in executor threads
        self.load()

    def load(self) -> None:
        try:
            with open(self.path) as f:
                raw = json.load(f)
        except FileNotFoundError:
            return
        from txbroker.protocol import scram

        users: dict[str, dict[str, scram.ScramCredential]] = {}
        for user, mechs in raw.get("users", {}).items():
            users[user] = {
                mech: scram.ScramCredential(base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                                            base64.b64decode(c["server_key"]), int(c["iterations"]))
                for mech, c in mechs.items() if mech in scram.MECHANISMS}
        self._users = users

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations (what DescribeUserScramCredentials shows)."""
        return {u: {m: c.iterations for m, c in mechs.items()} for u, mechs in self._users.items() if mechs}

    def apply(self, upserts: dict[tuple[str, str], scram.ScramCredential],
              deletions: list[tuple[str, str]]) -> None:
        """Apply one AlterUserScramCredentials' accepted changes, durably, as one write."""
        with self._lock:
            users = {u: dict(m) for u, m in self._users.items()}
            for user, mech in deletions:
                users.get(user, {}).pop(mech, None)
            for (user, mech), cred in upserts.items():
                users.setdefault(user, {})[mech] = cred
            users = {u: m for u, m in users.items() if m}
            payload = {"version": 1, "users": {
                u: {m: {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key),
                        "server_key": _b64(c.server_key), "iterations": c.iterations}
                    for m, c in mechs.items()} for u, mechs in sorted(users.items())}}
            write_durably(self.path, json.dumps(payload, indent=1).encode())
            self._users = users


def add_users(data_dir: str, users: dict[str, str], mechanisms: Iterable[str] | None = None,
              iterations: int | None = None) -> None:
    """Create or replace SCRAM credentials for ``users`` (name -> password) before a broker
    starts on ``data_dir``, as ``kafka-storage format --add-scram`` does for Kafka
    (default: every mechanism, at the minimum iteration count)."""
    from txbroker.protocol import scram

    mechanisms = tuple(scram.MECHANISMS) if mechanisms is None else mechanisms
    iterations = scram.MIN_ITERATIONS if iterations is None else iterations
    os.makedirs(data_dir, exist_ok=True)
    store = ScramCredentialStore(data_dir)
    upserts = {(user, mech): scram.make_credential(scram.mechanism(mech), password, iterations=iterations)
               for user, password in users.items() for mech in mechanisms}
    store.apply(upserts, [])

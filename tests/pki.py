"""Throwaway TLS material for tests: a CA, and certificates it signs, made with the
openssl command line (EC P-256: quick to generate). PEM files in one directory."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str = "ca") -> Path:
    """``name``.pem / ``name``.key: a self-signed CA valid for two days."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(directory, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             # Python 3.13's default client context verifies strictly (VERIFY_X509_STRICT):
             # a CA certificate without a keyUsage extension is refused.
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return directory / f"{name}.pem"


def make_cert(directory: Path, name: str, cn: str, ca: str = "ca",
              san: str | None = "DNS:localhost,IP:127.0.0.1") -> Path:
    """``name``.pem (certificate), ``name``.key (PKCS#8 key) and ``name``-keystore.pem
    (key + certificate: a Kafka PEM keystore), signed by ``ca``."""
    _openssl(directory, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
    extra: list[str] = []
    if san:
        (directory / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
             "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
             *extra)
    (directory / f"{name}-keystore.pem").write_text(
        (directory / f"{name}.key").read_text() + (directory / f"{name}.pem").read_text())
    return directory / f"{name}.pem"

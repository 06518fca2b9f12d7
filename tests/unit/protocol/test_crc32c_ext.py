"""protocol/crc32c_ext.py: the crc32c extension loaded without its package's
``__init__`` computes the same CRC-32C, and the broker's modules do not import
``importlib.metadata`` (the 8 ms the loader exists to save)."""

from __future__ import annotations

import os
import subprocess
import sys

import crc32c as package
from txbroker.protocol.crc32c_ext import crc32c


def test_the_check_value_of_crc32c():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_the_same_crc_as_the_package():
    for size in (0, 1, 7, 61, 4096, 100_003):
        data = os.urandom(size)
        assert crc32c(data) == package.crc32c(data)
        assert crc32c(memoryview(bytearray(data))[3:]) == package.crc32c(data[3:])


def test_the_broker_start_reads_no_package_metadata():
    check = ("import sys, txbroker.broker.main, txbroker.protocol.records\n"
             "assert 'importlib.metadata' not in sys.modules\n"
             "assert 'crc32c' not in sys.modules, 'the package __init__ ran'\n")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr

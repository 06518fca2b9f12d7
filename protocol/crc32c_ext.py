"""CRC-32C (Castagnoli) from the ``crc32c`` package's C extension.

The extension is loaded without running the package's ``__init__``, which reads its
own version with ``importlib.metadata`` (and, through it, ``email``'s parser): about
8 ms of a broker start that takes under 0.2 s. If the package's layout ever differs,
the package is imported as usual.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
from importlib.util import find_spec, module_from_spec, spec_from_file_location
from pathlib import Path

__all__ = ["crc32c"]

_EXTENSION = "crc32c._crc32c"


def _load() -> Callable[[bytes | bytearray | memoryview], int]:
    module = sys.modules.get(_EXTENSION)
    if module is None:
        package = find_spec("crc32c")
        for folder in (package.submodule_search_locations or []) if package else []:
            for suffix in EXTENSION_SUFFIXES:
                path = Path(folder) / f"_crc32c{suffix}"
                if path.is_file():
                    spec = spec_from_file_location(
                        _EXTENSION, path, loader=ExtensionFileLoader(_EXTENSION, str(path)))
                    if spec is not None:
                        module = module_from_spec(spec)
                        spec.loader.exec_module(module)  # type: ignore[union-attr]
                        sys.modules[_EXTENSION] = module
                        break
            if module is not None:
                break
    if module is None or not hasattr(module, "crc32c"):
        import crc32c as package_module

        return package_module.crc32c
    return module.crc32c


crc32c = _load()

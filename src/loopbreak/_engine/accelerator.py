"""Whether the compiled kernels run: loaded on first use, once per process.

``judging.compiled = "auto"`` (the default) runs them where numba imports; ``"off"`` runs
the pure-Python rules, which make the same decisions. numba is never imported unless a
rule asks, so ``import loopbreak`` and the command line stay quick.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType

_lock = threading.Lock()
_loaded: list[ModuleType | None] = []  # empty: not tried yet


def kernels() -> ModuleType | None:
    """The compiled module, or ``None`` where numba (or numpy) is missing or will not load."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if not _loaded:
            try:
                from loopbreak._engine import compiled
                compiled.warm()
            except ImportError:
                _loaded.append(None)
            except Exception as exc:  # a broken numba install falls back too, said once
                logging.getLogger("loopbreak").warning(
                    "the compiled rules did not load (%s: %s); running the pure-Python ones",
                    type(exc).__name__, exc)
                _loaded.append(None)
            else:
                _loaded.append(compiled)
    return _loaded[0]


def wanted(setting: str) -> ModuleType | None:
    """The kernels to use under ``judging.compiled = setting``."""
    return None if setting == "off" else kernels()

"""Whether the compiled kernels run: loaded once per process, when it pays.

``judging.compiled = "auto"`` (the default) runs them where numba imports; ``"off"`` runs
the pure-Python rules, which make the same decisions. Importing numba and loading the
kernels costs ~0.6 s (the first time on a machine, 5-10 s of compiling), more than a short
job spends judging (``loopbreak demo`` runs in 0.35 s): so the faces that run long (the
proxy, the in-engine processors, the bench) load them when they start, and any other
process once its rules have judged ``LOAD_AFTER_CHARS`` characters without them. A rule
made before they load stays in Python to its end; one made after runs compiled.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType

LOAD_AFTER_CHARS = 1_000_000
"""Characters judged in Python before a process loads the kernels: about 0.2 s of
block-repeat alone, where loading costs ~0.6 s once (a job this long runs on)."""

_lock = threading.Lock()
_loaded: list[ModuleType | None] = []  # empty: not tried yet
_judged = [0]


def kernels() -> ModuleType | None:
    """Load the compiled module now (once); ``None`` where numba (or numpy) is missing or
    will not load."""
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


def loaded() -> ModuleType | None:
    """The compiled module if it has been loaded; never loads it."""
    return _loaded[0] if _loaded else None


def judged_in_python(chars: int) -> None:
    """A rule that could have run compiled judged ``chars`` in Python: past
    ``LOAD_AFTER_CHARS`` in all, the kernels load (for the rules made after)."""
    if _loaded:
        return
    _judged[0] += chars
    if _judged[0] >= LOAD_AFTER_CHARS:
        kernels()


def load_kernels() -> bool:
    """Load the compiled kernels now, where numba is installed (``loopbreak[fast]``); the
    rules made after run them. A host that wants no pause later calls this at its start
    (the proxy and the in-engine processors do). ``False`` where they cannot run."""
    return kernels() is not None


def wanted(setting: str) -> ModuleType | None:
    """Load the kernels now unless ``judging.compiled = setting`` turns them off (a long
    job's start); the module, or ``None`` when they will not run."""
    return None if setting == "off" else kernels()

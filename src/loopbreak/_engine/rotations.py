"""Verdicts on repeating units, kept by their cycle.

``cycle`` and ``counter-cycle`` judge the unit a window repeats (its shape, whether it
counts) with a test that reads the unit round its cycle, so every rotation of a unit gets
the answer the unit gets. A loop cut again and again (a proxy's retries, rows of data that
trip a rule every few dozen rows and start a fresh one) brings the same few cycles back,
each time in another rotation: kept by the unit alone, every rotation was judged anew.
"""

from __future__ import annotations

from collections.abc import Callable


class RotationVerdicts:
    """Verdicts of the units judged lately, each answering every rotation of its unit.

    A string is a rotation of a unit exactly when the unit doubled holds it (and it is as
    long): a verdict is found by one search per kept unit of that length, and by the unit
    itself at once. At most ``most`` cycles are kept (then all are dropped): a bounded memory
    of at most ``3 * most`` units' characters. Shared by threads without a lock: a verdict is
    the same whoever judged it, so a race at most judges a unit twice or keeps a few more.
    """

    __slots__ = ("_by_length", "_by_unit", "_cycles", "_most")

    def __init__(self, most: int = 64) -> None:
        self._most = most
        self._by_unit: dict[str, bool] = {}
        self._by_length: dict[int, list[tuple[str, bool]]] = {}
        self._cycles = 0

    def __len__(self) -> int:
        """Cycles kept."""
        return self._cycles

    def get(self, unit: str) -> bool | None:
        """The verdict kept for ``unit`` or a rotation of it, or ``None``."""
        verdict = self._by_unit.get(unit)
        if verdict is not None:
            return verdict
        for doubled, known in self._by_length.get(len(unit), ()):
            if unit in doubled:
                self._keep_unit(unit, known)
                return known
        return None

    def verdict(self, unit: str, judge: Callable[[str], bool]) -> bool:
        """The verdict kept for ``unit`` or a rotation of it, else ``judge(unit)``, kept."""
        verdict = self.get(unit)
        if verdict is None:
            verdict = judge(unit)
            self.keep(unit, verdict)
        return verdict

    def keep(self, unit: str, verdict: bool) -> None:
        """Keep ``verdict`` for ``unit`` and every rotation of it."""
        if self._cycles >= self._most:
            self._by_length.clear()
            self._cycles = 0
        self._by_length.setdefault(len(unit), []).insert(0, (unit + unit, verdict))
        self._cycles += 1
        self._keep_unit(unit, verdict)

    def _keep_unit(self, unit: str, verdict: bool) -> None:
        by_unit = self._by_unit
        if len(by_unit) >= self._most:
            by_unit.clear()
        by_unit[unit] = verdict

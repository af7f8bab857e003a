"""One module per single-call rule; each class has ``feed(delta) -> Trip | None``."""

from loopbreak._engine.detectors.block_repeat import BlockRepeatDetector
from loopbreak._engine.detectors.char_cap import CharCapDetector
from loopbreak._engine.detectors.char_flood import CharFloodDetector
from loopbreak._engine.detectors.char_run import CharRunDetector
from loopbreak._engine.detectors.control_tokens import ControlTokensDetector
from loopbreak._engine.detectors.counter_cycle import CounterCycleDetector
from loopbreak._engine.detectors.cycle import CycleDetector
from loopbreak._engine.detectors.degeneracy import DegeneracyDetector
from loopbreak._engine.detectors.identical_chunks import IdenticalChunksDetector
from loopbreak._engine.detectors.lines import LinesDetector
from loopbreak._engine.detectors.progression import ProgressionDetector
from loopbreak._engine.detectors.stale_words import StaleWordsDetector

__all__ = [
    "BlockRepeatDetector",
    "CharCapDetector",
    "CharFloodDetector",
    "CharRunDetector",
    "ControlTokensDetector",
    "CounterCycleDetector",
    "CycleDetector",
    "DegeneracyDetector",
    "IdenticalChunksDetector",
    "LinesDetector",
    "ProgressionDetector",
    "StaleWordsDetector",
]

"""loopbreak: circuit breakers for LLM agent loops, judged while the stream is produced.

The only public door: everything a user or an adapter needs is re-exported here.
"""

from loopbreak._config import (
    BlockRepeatConfig,
    CharFloodConfig,
    CharRunConfig,
    Config,
    ControlTokensConfig,
    CounterCycleConfig,
    CycleConfig,
    DegeneracyConfig,
    IdenticalChunksConfig,
    JudgingConfig,
    LimitsConfig,
    LinesConfig,
    LoadedConfig,
    ProgressionConfig,
    ProxyConfig,
    RecoveryConfig,
    StaleWordsConfig,
    StallConfig,
    ToolFailureConfig,
    load_config,
)
from loopbreak._engine.accelerator import load_kernels
from loopbreak._engine.call_guard import CallGuard, CallSummary, ChannelGuard, build_detectors
from loopbreak._engine.detectors import (
    BlockRepeatDetector,
    CharCapDetector,
    CharFloodDetector,
    CharRunDetector,
    ControlTokensDetector,
    CounterCycleDetector,
    CycleDetector,
    DegeneracyDetector,
    IdenticalChunksDetector,
    LinesDetector,
    ProgressionDetector,
    StaleWordsDetector,
)
from loopbreak._engine.notices import TEXTS, detect_language, render
from loopbreak._engine.scan import scan
from loopbreak._engine.session_guard import CallOutcome, SessionGuard
from loopbreak._engine.stall import Reaction, StallVerdict
from loopbreak._engine.tool_failure import (
    ToolDecision,
    ToolGuidance,
    canonical_arguments,
    looks_like_failure,
    normalise_error,
)
from loopbreak._engine.trip import CHANNELS, Channel, Detector, Trip
from loopbreak._errors import ConfigError, InputError, LoopbreakError, StreamFormatError
from loopbreak._recovery import LoopCutError

__version__ = "0.1.0"

__all__ = [
    "CHANNELS",
    "TEXTS",
    "BlockRepeatConfig",
    "BlockRepeatDetector",
    "CallGuard",
    "CallOutcome",
    "CallSummary",
    "Channel",
    "ChannelGuard",
    "CharCapDetector",
    "CharFloodConfig",
    "CharFloodDetector",
    "CharRunConfig",
    "CharRunDetector",
    "Config",
    "ConfigError",
    "ControlTokensConfig",
    "ControlTokensDetector",
    "CounterCycleConfig",
    "CounterCycleDetector",
    "CycleConfig",
    "CycleDetector",
    "DegeneracyConfig",
    "DegeneracyDetector",
    "Detector",
    "IdenticalChunksConfig",
    "IdenticalChunksDetector",
    "InputError",
    "JudgingConfig",
    "LimitsConfig",
    "LinesConfig",
    "LinesDetector",
    "LoadedConfig",
    "LoopCutError",
    "LoopbreakError",
    "ProgressionConfig",
    "ProgressionDetector",
    "ProxyConfig",
    "Reaction",
    "RecoveryConfig",
    "SessionGuard",
    "StaleWordsConfig",
    "StaleWordsDetector",
    "StallConfig",
    "StallVerdict",
    "StreamFormatError",
    "ToolDecision",
    "ToolFailureConfig",
    "ToolGuidance",
    "Trip",
    "build_detectors",
    "canonical_arguments",
    "detect_language",
    "load_config",
    "load_kernels",
    "looks_like_failure",
    "normalise_error",
    "render",
    "scan",
]

# Show public names as ``loopbreak.X`` (in reprs and docs), not as the private module
# they live in.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("loopbreak.") and isinstance(_obj, type):
        _obj.__module__ = "loopbreak"
del _name, _obj

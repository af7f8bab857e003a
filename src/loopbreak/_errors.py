"""Errors raised by loopbreak.

The tree::

    LoopbreakError                      every error this package raises on purpose
    ├── ConfigError(ValueError)         a configuration key, value or file is wrong
    └── InputError(ValueError)          input to the engine or a command is unusable
        └── StreamFormatError           a recorded or upstream stream does not parse

A trip is not an error: detectors return :class:`loopbreak.Trip` values and
adapters decide what to do with them.
"""

from __future__ import annotations


class LoopbreakError(Exception):
    """Base class of every error loopbreak raises on purpose."""


class ConfigError(LoopbreakError, ValueError):
    """A configuration key, value, file or environment variable is wrong.

    The message is one line naming the key, the rule it broke and the value given.
    """


class InputError(LoopbreakError, ValueError):
    """Input handed to the engine or a command cannot be used as it is."""


class StreamFormatError(InputError):
    """A recorded or upstream stream does not follow its wire format."""

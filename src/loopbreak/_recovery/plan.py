"""What happens after a trip or a denial, decided once for every face.

The faces (the proxy's streamed and whole routes, the LiteLLM hook, the openai wrapper, the
LangChain middleware) each speak their own wire or framework; what they do after a rule
fires is the same decision, made here without I/O: given the trip, the configuration, the
turn's retries so far and whether tool calls already reached the client, :func:`plan_cut`
says whether to re-ask without thinking, end lawfully or end with an error, what the model
and the client read, and which finish reason ends the answer. :func:`plan_denial` does the
same for a tool call the history says must not run. Each face only carries the plan out.

The decisions:

* ``retry`` only for a reasoning trip, with ``recovery.on_trip = "retry"``, while the turn
  has retries left, and only when no tool call has reached the client (its tools would run
  while the re-asked model plans again);
* an answer that sent complete tool calls ends with the tool-call finish reason
  (``tool_calls`` / ``tool_use``): the client runs them, as it would have;
* a denial re-asks the model once with the reasons; if it insists, the answer ends with the
  reason as text and a normal finish.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from loopbreak._config import Config
from loopbreak._engine.notices import Language, cut_notice
from loopbreak._engine.trip import Trip
from loopbreak._errors import LoopbreakError

CutMode = Literal["retry", "stop", "error"]
Wire = Literal["openai", "anthropic"]

OTHER_CALL_DENIED = "[loopbreak] not run: another call in the same response was denied"


class LoopCutError(LoopbreakError):
    """A model call was cut and ``recovery.on_trip`` is ``error``."""

    def __init__(self, trip: Trip, notice: str) -> None:
        super().__init__(cut_message(trip))
        self.trip = trip
        self.notice = notice


def cut_message(trip: Trip) -> str:
    """The one-line error a cut with ``on_trip = "error"`` ends with."""
    return (f"loopbreak cut a looping {trip.channel} stream ({trip.rule}) after "
            f"{trip.offset:,} characters")


def normal_finish(wire: Wire, tools_sent: bool = False) -> str:
    """The finish reason of a lawful end: the tool-call one when tool calls went out."""
    if wire == "openai":
        return "tool_calls" if tools_sent else "stop"
    return "tool_use" if tools_sent else "end_turn"


@dataclass(frozen=True)
class CutPlan:
    """What a face does after ``trip``."""

    trip: Trip
    mode: CutMode
    notice: str
    """What the model reads (the retry's newest user text; the LangChain error's notice)."""
    shown: str
    """What the client sees before the end or the retry ("" with ``recovery.notice`` off)."""
    finish: str
    """The finish reason that ends the answer (``stop`` mode; after a retry, the retry's own)."""
    error: str
    """The message of the error the answer ends with (``error`` mode)."""


def plan_cut(trip: Trip, config: Config, *, language: Language, retries_used: int,
             tools_sent: bool = False, wire: Wire = "openai") -> CutPlan:
    """The recovery for ``trip``: ``retries_used`` is how many retries this turn already
    spent (read from the history, or counted by the host); ``tools_sent``, whether complete
    tool calls of this answer already reached the client."""
    recovery = config.recovery
    if recovery.on_trip == "error":
        mode: CutMode = "error"
    elif (recovery.on_trip == "retry" and trip.channel == "reasoning" and not tools_sent
          and retries_used < recovery.retries_per_turn):
        mode = "retry"
    else:
        mode = "stop"
    notice = cut_notice(trip, language)
    return CutPlan(trip, mode, notice, notice if recovery.notice else "",
                   normal_finish(wire, tools_sent), cut_message(trip))


@dataclass(frozen=True)
class DenialPlan:
    """What a face does when tool calls of an answer must not run."""

    reask: bool
    """Ask the model once more with ``reasons`` in its history; else end with ``reason``."""
    reasons: dict[str, str]
    """Per call id of the answer: why it was not run."""
    reason: str
    """The first denial's reason: the text an insisting model's answer ends with."""


def plan_denial(call_ids: Sequence[str], denied: Mapping[str, str], *,
                reasked: bool) -> DenialPlan:
    """The recovery when the calls ``denied`` (id -> reason) of an answer whose calls are
    ``call_ids`` must not run: the first time the model is re-asked, after that the answer
    ends with the reason. Calls of the same answer that were not denied are not run either
    (they were planned together)."""
    if not denied:
        raise ValueError("plan_denial needs at least one denied call")
    reasons = {cid: denied.get(cid, OTHER_CALL_DENIED) for cid in call_ids}
    return DenialPlan(not reasked, reasons, next(iter(denied.values())))

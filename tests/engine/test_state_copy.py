"""The session guard's own deep copy (the checkpoints a replayed history keeps): the same
state as ``copy.deepcopy`` makes, nothing mutable shared with the original, and a value
two fields share still shared in the copy."""

from __future__ import annotations

import copy
import json
from collections import deque
from typing import Any

from loopbreak import Config, SessionGuard
from loopbreak._engine.state_copy import copy_fields, copy_value
from loopbreak._recovery.history import replay
from loopbreak.bench.adversarial import history_body

_IMMUTABLE = (str, int, float, bool, bytes, type(None), Config)


def _reachable(value: Any, found: dict[int, Any]) -> None:
    """Every object ``value`` holds (through fields and containers), by id."""
    if isinstance(value, _IMMUTABLE) or type(value).__module__ == "loopbreak._config" or \
            id(value) in found:
        return
    found[id(value)] = value
    if isinstance(value, dict):
        for key, item in value.items():
            _reachable(key, found)
            _reachable(item, found)
    elif isinstance(value, (list, tuple, set, frozenset, deque)):
        for item in value:
            _reachable(item, found)
    elif hasattr(value, "__dict__"):
        for item in vars(value).values():
            _reachable(item, found)


def _mutable(value: Any) -> bool:
    if isinstance(value, (tuple, frozenset)):
        return False  # what they hold is checked on its own
    return not getattr(getattr(type(value), "__dataclass_params__", None), "frozen", False) \
        or "_shape" in vars(value)  # a frozen step still keeps its shape once worked out


def _state(value: Any) -> Any:
    from test_replay_checkpoints import state_of

    return state_of(value)


def _worked_session() -> SessionGuard:
    """A guard after a long history: failing and repeating tools, a cycle closed, every
    rule holding state."""
    body = history_body(120)
    messages = body["messages"]
    # Two tools taking turns with the same results: alternation closes a cycle.
    for i in range(8):
        name = ("read_file", "run_tests")[i % 2]
        messages.append({"role": "assistant", "content": "", "reasoning_content": "Again.",
                         "tool_calls": [{"id": f"x{i}", "type": "function", "function": {
                             "name": name, "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"x{i}",
                         "content": "Error: failed\nexit code 1" if i % 2 else "same text"})
    return replay(json.loads(json.dumps(body)), "openai", Config()).session


def test_the_copy_holds_the_same_state_and_shares_nothing_it_could_change() -> None:
    session = _worked_session()
    alternation = vars(session)["_alternation"]
    assert vars(alternation)["_cycle"] is not None  # the history closed a cycle
    assert any(step.shape for step in vars(alternation)["_steps"])  # shapes worked out
    before = _state(session)
    copied = copy.deepcopy(session)
    assert _state(copied) == before == _state(copy.deepcopy(session, {}))
    originals: dict[int, Any] = {}
    _reachable(session, originals)
    copies: dict[int, Any] = {}
    _reachable(copied, copies)
    shared = [value for key, value in copies.items() if key in originals and _mutable(value)]
    assert shared == []
    # The copy goes on alone: the original does not move.
    for i in range(6):
        copied.after_tool("read_file", {"path": f"z{i % 2}.py"}, "Error: nope", failed=True)
        copied.observe("让我再检查一下这个文件。" * 50)
    assert _state(copied) != before
    assert _state(session) == before


def test_a_value_two_fields_share_stays_shared() -> None:
    class Holder:
        def __init__(self) -> None:
            self.seen: set[str] = {"a"}
            self.again = self.seen
            self.counts: dict[tuple[str, str], int] = {("a", "b"): 1}
            self.nested = {"k": self.counts}
            self.steps: deque[list[str]] = deque([["x"]], maxlen=3)
            self.mixed = (1, ["y"])

        def __deepcopy__(self, memo: dict[int, Any]) -> Holder:
            return copy_fields(self, memo)

    holder = Holder()
    copied = copy.deepcopy(holder)
    assert copied.seen is copied.again and copied.seen is not holder.seen
    assert copied.nested["k"] is copied.counts and copied.counts is not holder.counts
    assert copied.steps.maxlen == 3 and copied.steps[0] is not holder.steps[0]
    assert copied.mixed == holder.mixed and copied.mixed[1] is not holder.mixed[1]
    assert (copied.seen, copied.counts, list(copied.steps)) == ({"a"}, {("a", "b"): 1}, [["x"]])
    memo: dict[int, Any] = {}
    plain = ("a", 1, None)
    assert copy_value(plain, memo) is plain and memo == {}

"""Deep copies of the session guard's state, for the checkpoints a replayed history keeps.

A proxy keeps where each session's replay left off, a copy of its guard, on every
request, and a resumed replay copies it again. ``copy.deepcopy`` takes any object
through its generic protocol, one at a time: ~260 us for a guard after 800 calls,
most of it sets and dicts of strings and counts that C copies in one call. The
rules' state is such plain values; what is not plain (an object without
``__deepcopy__``, a 4-gram set) still goes through ``copy.deepcopy``, with the same
memo, so a value shared by two fields stays shared in the copy.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")

# Values that are never changed in place: the copy shares them.
_ATOMIC = frozenset({str, int, bool, float, bytes, type(None)})


def _all_atomic(values: Iterable[Any]) -> bool:
    return all(type(item) in _ATOMIC for item in values)


def copy_value(value: T, memo: dict[int, Any]) -> T:
    """A deep copy of ``value`` (``copy.deepcopy(value, memo)``, quicker for plain data)."""
    kind = type(value)
    if kind in _ATOMIC:
        return value
    found = memo.get(id(value))
    if found is not None:
        return found  # type: ignore[no-any-return]
    copied: Any
    if kind is set:
        if not _all_atomic(value):  # type: ignore[arg-type]
            return copy.deepcopy(value, memo)
        copied = set(value)  # type: ignore[call-overload]
    elif kind is dict:
        copied = {}
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) not in _ATOMIC and not (type(key) is tuple and _all_atomic(key)):
                key = copy.deepcopy(key, memo)
            copied[key] = copy_value(item, memo)
    elif kind is tuple:
        if _all_atomic(value):  # type: ignore[arg-type]
            return value
        return copy.deepcopy(value, memo)
    elif kind is list:
        copied = [copy_value(item, memo) for item in value]  # type: ignore[attr-defined]
    elif kind is deque:
        copied = deque((copy_value(item, memo) for item in value),  # type: ignore[attr-defined]
                       value.maxlen)  # type: ignore[attr-defined]
    else:
        own = getattr(kind, "__deepcopy__", None)
        if own is None:
            return copy.deepcopy(value, memo)
        copied = own(value, memo)  # what copy.deepcopy would call, without its walk
    memo[id(value)] = copied
    return copied  # type: ignore[no-any-return]


def copy_fields(value: T, memo: dict[int, Any]) -> T:
    """A deep copy of ``value``, an object whose state is its ``__dict__``: a
    ``__deepcopy__`` for the rules' classes. Made without calling ``__init__`` (nor a
    frozen class's ``__setattr__``)."""
    copied = object.__new__(type(value))
    memo[id(value)] = copied
    fields = copied.__dict__
    for name, item in value.__dict__.items():
        fields[name] = copy_value(item, memo)
    return copied


class CopiedByFields:
    """A ``__deepcopy__`` by :func:`copy_fields`, for the rules' classes (their state is
    their ``__dict__``)."""

    __slots__ = ()

    def __deepcopy__(self: T, memo: dict[int, Any]) -> T:
        return copy_fields(self, memo)

"""The frozen records made for every message of a replayed history write their fields
directly: their hand-written ``__init__`` must stay the one ``dataclass`` would write."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from loopbreak import CallOutcome, CallSummary, StallVerdict
from loopbreak._engine.tool_steps import ToolStep

RECORDS = [CallSummary, CallOutcome, StallVerdict, ToolStep]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_the_init_takes_every_field_in_order_with_its_default(record: type) -> None:
    fields = dataclasses.fields(record)
    params = list(inspect.signature(record.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields):
        default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        assert p.default == default, f.name
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_a_record_holds_what_it_was_given_and_stays_frozen(record: type) -> None:
    fields = dataclasses.fields(record)
    values = {f.name: f"value of {f.name}" for f in fields}
    made = record(**values)
    assert {f.name: getattr(made, f.name) for f in fields} == values
    assert dataclasses.replace(made) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, fields[0].name, "changed")
    required = {f.name: values[f.name] for f in fields if f.default is dataclasses.MISSING}
    plain = record(**required)
    assert all(getattr(plain, f.name) == f.default for f in fields
               if f.default is not dataclasses.MISSING)

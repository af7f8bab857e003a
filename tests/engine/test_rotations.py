"""The verdicts cycle and counter-cycle keep by a unit's cycle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loopbreak._engine.rotations import RotationVerdicts


@given(st.text(alphabet="ab0 \n(", min_size=1, max_size=12), st.text(alphabet="ab0 \n(",
                                                                     min_size=1, max_size=12))
def test_a_verdict_answers_its_unit_and_every_rotation_of_it_only(unit: str,
                                                                  other: str) -> None:
    verdicts = RotationVerdicts()
    verdicts.keep(unit, True)
    for k in range(len(unit)):
        assert verdicts.get(unit[k:] + unit[:k]) is True
    rotation = any(other == unit[k:] + unit[:k] for k in range(len(unit)))
    assert verdicts.get(other) is (True if rotation else None)


def test_what_is_kept_is_bounded() -> None:
    verdicts = RotationVerdicts(8)
    for n in range(50):
        unit = f"step {n} of {n + 1}\n"
        verdicts.keep(unit, n % 2 == 0)
        assert 1 <= len(verdicts) <= 8
        assert verdicts.get(unit[3:] + unit[:3]) is (n % 2 == 0)
    # the oldest went when the cycles kept reached the bound
    assert verdicts.get("step 0 of 1\n") is None

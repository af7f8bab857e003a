"""Keys and signatures of the tool-failure breaker."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loopbreak import canonical_arguments, normalise_error

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                        children, max_size=4),
    max_leaves=20,
)


def test_keys_are_sorted_and_json_strings_are_parsed() -> None:
    assert canonical_arguments({"b": 1, "a": [2, 3]}) == canonical_arguments('{"a":[2,3],"b":1}')


def test_numbers_are_not_normalised() -> None:
    assert canonical_arguments({"line": 12}) != canonical_arguments({"line": 13})


def test_text_that_is_not_json_is_used_stripped() -> None:
    assert canonical_arguments("  ls -la  ") == canonical_arguments("ls -la")


def test_depth_and_size_are_bounded_but_distinct() -> None:
    deep: dict[str, object] = {"x": 1}
    for _ in range(50):
        deep = {"d": deep}
    assert len(canonical_arguments(deep, max_depth=8)) < 200
    big_a = {"content": "a" * 100_000}
    big_b = {"content": "a" * 99_999 + "b"}
    key_a, key_b = canonical_arguments(big_a), canonical_arguments(big_b)
    assert len(key_a) <= 4096 and key_a != key_b


@given(json_values)
def test_canonical_form_is_total_and_stable(value: object) -> None:
    assert canonical_arguments(value) == canonical_arguments(value)


def test_error_text_is_normalised() -> None:
    a = normalise_error("Timeout after 3000 ms at 0xDEADBEEF (pid 4242)\n  retry")
    b = normalise_error("timeout after 2999 ms at 0xdeadbef0 (pid 17)   retry")
    assert a == b == "timeout after <n> ms at <hex> (pid <n>) retry"
    assert len(normalise_error("x" * 1000)) == 160
    assert normalise_error("commit 3f2a9c1b not found") == "commit <hex> not found"

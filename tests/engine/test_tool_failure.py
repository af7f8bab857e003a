"""Keys and signatures of the tool-failure breaker."""

from __future__ import annotations

import json

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


@given(json_values, st.sampled_from(["read_file", "run", ""]), st.booleans())
def test_a_calls_key_is_its_name_and_canonical_arguments_kept_or_not(
        value: object, name: str, as_text: bool) -> None:
    # Keys of arguments sent as JSON text are kept between requests (one object for the
    # same call each time); every other key is made anew; both read the same.
    from loopbreak._engine.tool_failure import ToolFailureBreaker, clear_caches

    arguments = json.dumps(value) if as_text else value
    breaker = ToolFailureBreaker()
    key = breaker.key(name, arguments)
    assert key == f"{name}\x00{canonical_arguments(arguments)}"
    # The arguments as the next request brings them: an equal text, another object.
    again = breaker.key(name, json.loads(json.dumps(arguments)))
    assert again == key and (again is key) == isinstance(arguments, str)
    clear_caches()
    assert breaker.key(name, arguments) == key
    assert breaker.key(name + "x", arguments) != key


def test_long_arguments_are_keyed_without_being_kept() -> None:
    from loopbreak._engine.tool_failure import ToolFailureBreaker

    text = json.dumps({"content": "a" * 10_000})
    breaker = ToolFailureBreaker()
    key = breaker.key("write", text)
    assert key == "write\x00" + canonical_arguments(text) and len(key) < 4200
    assert breaker.key("write", text) == key and breaker.key("write", text) is not key

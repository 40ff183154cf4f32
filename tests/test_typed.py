"""fusebench.typed.check_type: each kind of type hint a spec field can have, including ``X | None`` (a
``types.UnionType``, what ``from __future__ import annotations`` hints evaluate to), which once accepted
any value."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import pytest

from fusebench import benchmarks
from fusebench.typed import ConfigError, check_type, matches


@pytest.mark.parametrize("hint", [int | None, Optional[int]])
def test_optional_int_accepts_int_and_none_and_refuses_the_rest(hint: Any) -> None:
    assert check_type(3, hint, "k") == 3 and check_type(None, hint, "k") is None
    for bad in ("two", 2.5, True, [1]):
        with pytest.raises(ConfigError, match=r"^k: expected int"):
            check_type(bad, hint, "k")


def test_unions_lists_and_numbers() -> None:
    assert check_type("32", str | int, "p") == "32" and check_type(32, str | int, "p") == 32
    assert check_type(1, float, "f") == 1.0 and type(check_type(1, float, "f")) is float  # widened
    with pytest.raises(ConfigError, match="f: expected float"):
        check_type(True, float, "f")  # a bool is never a number
    assert check_type([1, 2], list[int] | None, "l") == [1, 2]
    with pytest.raises(ConfigError, match=r"l\[1\]: expected int"):
        check_type([1, "x"], list[int] | None, "l")


def test_an_optional_spec_field_refuses_a_wrong_type_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"downstream.shots: expected int, got str 'five'"):
        benchmarks.load("quickstart", overrides={"downstream.shots": "five"})


def test_containers_are_checked_item_by_item_with_the_item_named() -> None:
    """One check for the spec's fields and the components' options (fusebench.options used a second, looser copy):
    sequences and mappings with their items, each failure naming the item; expected values worked out by hand."""
    assert check_type((1, 2), list[int], "l") == [1, 2]  # a tuple (Python API) for a list field: a list back
    assert check_type([1, 2.5], tuple[int, float], "t") == [1, 2.5]  # as given (YAML gives lists)
    assert check_type((1, 2), tuple[float, ...], "t") == (1.0, 2.0)  # ints widened, the container kept
    for value, hint, message in [
            ("abc", Sequence[float], r"^s: expected a list, got str 'abc'"),  # text is no list of numbers
            ("ab", list, r"^s: expected a list, got str"),
            ([[1, "x"]], Sequence[Sequence[float]], r"^s\[0\]\[1\]: expected float, got str 'x'"),
            ([1], tuple[int, float], r"^s: expected a list of 2 items \(tuple\[int, float\]\), got 1"),
            ({"a": "3"}, Mapping[str, int], r"^s\.a: expected int, got str '3'"),
            ({1: 3}, dict[str, int], r"^s key 1: expected str, got int 1"),
            ([], dict, r"^s: expected a mapping, got list"),
            ([1.5], str | list[int], r"^s: expected str \| list\[int\], got list \[1\.5\]")]:
        with pytest.raises(ConfigError, match=message):
            check_type(value, hint, "s")
    # the predicate the options check uses gives the same verdicts
    assert [matches(v, t) for v, t in [([1, 2], tuple[int, ...]), ([1, 2.5], tuple[int, ...]), ({}, dict),
                                      ([], Sequence[int]), ("rgb", Sequence[str]), (None, int | None),
                                      (None, int), (object(), Any)]] == [True, False, True, True, False, True,
                                                                          False, True]

"""fusebench.typed.check_type: each kind of type hint a spec field can have, including ``X | None`` (a
``types.UnionType``, what ``from __future__ import annotations`` hints evaluate to), which once accepted
any value."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from fusebench import benchmarks
from fusebench.typed import ConfigError, check_type


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

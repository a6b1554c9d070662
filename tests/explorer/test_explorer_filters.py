"""Filter state <-> URL query params, and the SQL it produces."""

from __future__ import annotations

import pytest

from builder.errors import UsageError
from explorer.filters import Filters


def test_round_trip_through_query_params():
    filters = Filters(level=("1", "2"), model=("m,1",), flag=("none", "nondeterministic"), min_speedup=1.5)
    params = filters.to_query_params()
    assert params["level"] == ["1", "2"] and params["min_speedup"] == "1.5"
    assert Filters.from_query_params(
        {"level": ["1", "2"], "flag": ["none", "nondeterministic"], "min_speedup": "1.5"}
    ) == Filters(level=("1", "2"), flag=("none", "nondeterministic"), min_speedup=1.5)


def test_comma_lists_and_duplicates_from_hand_written_urls():
    assert Filters.from_query_params({"status": "correct,incorrect,correct"}).status == ("correct", "incorrect")
    assert Filters.from_query_params({}).is_empty()


def test_bad_values_are_usage_errors():
    with pytest.raises(UsageError, match="min_speedup"):
        Filters.from_query_params({"min_speedup": "fast"})
    with pytest.raises(UsageError, match="level"):
        Filters(level=("one",)).where()


def test_where_uses_parameters_only():
    where, params = Filters(task=("1/1'; DROP TABLE kernels; --",), min_speedup=2).where()
    assert "DROP" not in where and params == ["1/1'; DROP TABLE kernels; --", 2.0]
    assert Filters().where() == ("TRUE", [])


def test_a_bad_value_costs_only_itself():
    filters, problems = Filters.parse_query_params(
        {"level": ["1", "abc"], "status": "correct", "min_speedup": "nan", "task": "1/2"}
    )
    assert filters == Filters(level=("1",), status=("correct",), task=("1/2",))
    assert problems == ["level must be a whole number, got 'abc'", problems[1]]
    assert "min_speedup" in problems[1] and "'nan'" in problems[1]
    for bad in ("1e309", "-inf", "inf", "-1", "fast"):
        filters, problems = Filters.parse_query_params({"min_speedup": bad, "model": "m"})
        assert filters == Filters(model=("m",)) and len(problems) == 1 and repr(bad) in problems[0], bad
    assert Filters.parse_query_params({"min_speedup": "0.5"}) == (Filters(min_speedup=0.5), [])

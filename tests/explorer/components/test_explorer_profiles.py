"""Profile JSON (any shape the profilers write) turned into tables."""

from __future__ import annotations

import json

from explorer.components.profiles import clang_tidy_diagnostics, object_lists, parse_json_field, scalars


def test_error_and_bad_json_are_reported_not_raised():
    assert parse_json_field(None) == (None, "not recorded")
    assert parse_json_field(json.dumps({"error": "ncu not found"})) == (None, "ncu not found")
    value, problem = parse_json_field("{not json")
    assert value is None and problem.startswith("unreadable JSON")


def test_nested_lists_of_objects_become_tables():
    profile = {
        "kernels": [{"name": "k", "block": [256, 1, 1], "rules": [{"name": "SOL", "type": "WRN"}]}],
        "own_fraction": 0.8,
        "totals": {"device_ms": 1.5},
    }
    tables = object_lists(profile)
    assert set(tables) == {"kernels", "kernels[0].rules"}
    assert tables["kernels"].loc[0, "block"] == "[256, 1, 1]"
    assert tables["kernels[0].rules"].loc[0, "type"] == "WRN"
    assert scalars(profile) == {"own_fraction": 0.8, "totals.device_ms": 1.5}


def test_clang_tidy_diagnostics_sorted_by_line():
    text = json.dumps(
        {
            "diagnostics": [
                {"line": 9, "column": 1, "check": "b", "severity": "warning", "message": "m"},
                {"line": 3, "column": 2, "check": "a", "severity": "error", "message": "n"},
            ]
        }
    )
    assert list(clang_tidy_diagnostics(text)["line"]) == [3, 9]
    assert clang_tidy_diagnostics(json.dumps({"error": "timeout"})) is None

"""The ncu_report-module reader, run as parse_report runs it (a subprocess), against a stand-in module.

The stand-in mimics the documented surface of Nsight Compute's `ncu_report` (load_report, ranges,
actions, metric_by_name -> value()/unit(), rule_results_as_dicts); the real module is exercised by
the GPU test test_profile_gpu.py::test_module_reader_and_csv_reader_agree.
"""

from __future__ import annotations

import textwrap

import pytest

from builder.profile import ncu

STAND_IN = textwrap.dedent(
    """
    class _Metric:
        def __init__(self, value, unit):
            self._value, self._unit = value, unit
        def value(self):
            return self._value
        def unit(self):
            return self._unit

    class IAction:
        NameBase_DEMANGLED = 1

    class _Action:
        def __init__(self, name, metrics, rules):
            self._name, self._metrics, self._rules = name, metrics, rules
        def name(self, base=0):
            return self._name if base else "_Z" + self._name
        def metric_by_name(self, name):
            return self._metrics.get(name)
        def rule_results_as_dicts(self):
            return self._rules

    class _Range:
        def __init__(self, actions):
            self._actions = actions
        def num_actions(self):
            return len(self._actions)
        def action_by_idx(self, i):
            return self._actions[i]

    class _Context:
        def __init__(self, ranges):
            self._ranges = ranges
        def num_ranges(self):
            return len(self._ranges)
        def range_by_idx(self, i):
            return self._ranges[i]
        def get_version(self):
            return "stand-in 1.0"

    def _kernel(name, ns, sm, dram, occ, regs, static, dynamic, grid, block, rules):
        m = {
            "gpu__time_duration.sum": _Metric(ns, "nsecond"),
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": _Metric(sm, "%"),
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": _Metric(dram, "%"),
            "sm__warps_active.avg.pct_of_peak_sustained_active": _Metric(occ, "%"),
            "launch__registers_per_thread": _Metric(regs, "register/thread"),
            "launch__shared_mem_per_block_static": _Metric(static, "byte/block"),
            "launch__shared_mem_per_block_dynamic": _Metric(dynamic, "byte/block"),
        }
        for axis, g, b in zip("xyz", grid, block):
            m["launch__grid_dim_" + axis] = _Metric(g, "")
            m["launch__block_dim_" + axis] = _Metric(b, "")
        return _Action(name, m, rules)

    def load_report(path):
        rule = {"rule_identifier": "SOLBottleneck", "section_identifier": "SpeedOfLight",
                "rule_message": "{'title': 'High Throughput', 'message': 'Memory is  busy.', 'type': 'OPT'}",
                "speedup_estimation": {"type": "global", "speedup": 12.5}}
        silent = {"rule_identifier": "Quiet", "rule_message": {"message": ""}}
        return _Context([_Range([
            _kernel("tiled_kernel(float*, int)", 20000, 61.0, 30.0, 75.5, 40, 8192, 4096, (64, 1, 1), (256, 1, 1),
                    [rule, silent]),
            _kernel("void at::native::fill_kernel()", 5000, 10.0, 50.0, 20.0, 16, 0, 0, (8, 1, 1), (128, 1, 1), []),
        ])])
    """
)


@pytest.fixture
def stand_in_module(tmp_path, monkeypatch):
    module_dir = tmp_path / "extras" / "python"
    module_dir.mkdir(parents=True)
    (module_dir / "ncu_report.py").write_text(STAND_IN)
    monkeypatch.setenv("KA_NCU_REPORT_PYTHON", str(module_dir))
    report = tmp_path / "profile.ncu-rep"
    report.write_bytes(b"stand-in report")
    return report


def test_module_reader_entries(stand_in_module):
    assert ncu.report_module_dirs()[0].endswith("extras/python")
    profile = ncu.parse_report(stand_in_module)
    assert profile["source"] == "ncu_report" and profile["report_version"] == "stand-in 1.0"
    own, library = profile["kernels"]
    assert own["name"] == "tiled_kernel(float*, int)"  # the demangled name
    assert own["duration_ms"] == pytest.approx(0.02)
    assert (own["sm_pct"], own["dram_pct"], own["occupancy_pct"], own["registers"]) == (61.0, 30.0, 75.5, 40)
    assert own["shared_mem_bytes"] == 8192 + 4096
    assert own["grid"] == [64, 1, 1] and own["block"] == [256, 1, 1]
    assert own["library"] is False and library["library"] is True
    assert own["rules"] == [
        {
            "name": "SOLBottleneck",
            "type": "OPT",
            "title": "High Throughput",
            "text": "Memory is busy.",
            "section": "SpeedOfLight",
            "speedup_pct": 12.5,
            "speedup_type": "global",
        }
    ]
    assert ncu.promote(profile)["ncu_duration_ms"] == pytest.approx(0.025)


def test_broken_module_falls_back_with_the_reason(stand_in_module, monkeypatch, tmp_path):
    (tmp_path / "extras" / "python" / "ncu_report.py").write_text("raise ImportError('needs libstdc++ 14')\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # and no ncu for the CSV fallback
    error = ncu.parse_report(stand_in_module)["error"]
    assert "needs libstdc++ 14" in error and "ncu not found on PATH" in error

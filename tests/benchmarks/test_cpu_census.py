"""The bench's CPU census charges a process's CPU time to the kind of work it or an ancestor is named after."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from benchmarks.cpu_census import PARENT, CpuCensus, census_lines
from builder import config

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc (Linux)")

BUSY = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end:\n    pass\n"


def test_busy_children_are_charged_to_their_kind_by_working_directory_and_by_ancestor():
    census = CpuCensus(interval_s=0.1)
    census.start()
    with tempfile.TemporaryDirectory(prefix=config.SCRATCH_PREFIXES["compile"]) as scratch:
        by_cwd = subprocess.Popen([sys.executable, "-c", BUSY], cwd=scratch)
        # The busy process itself carries no marker: its parent shell's command line does.
        by_ancestor = subprocess.Popen(
            ["sh", "-c", f'cd / && "{sys.executable}" -c "$1"; true', config.SCRATCH_PREFIXES["baseline"] + "x", BUSY]
        )
        by_cwd.wait()
        by_ancestor.wait()
    time.sleep(0.2)
    census.mark("second")
    end = time.process_time() + 0.5
    while time.process_time() < end:  # the census's own process: the parent
        pass
    periods = census.stop()
    assert [name for name, *_ in periods] == ["start", "second"]
    first = periods[0][3]
    assert first.get("compile", 0.0) >= 0.7
    assert first.get("baseline children", 0.0) >= 0.7
    assert periods[1][3].get(PARENT, 0.0) >= 0.3
    assert "compile" not in periods[1][3]
    lines = census_lines(periods, cores=2)
    assert lines[0].startswith("start: ") and "compile" in lines[0] and "of 2 cores busy" in lines[0]


def _topology(root: Path, siblings: dict[int, str]) -> Path:
    for cpu, listed in siblings.items():
        (root / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (root / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(listed + "\n")
    return root


def test_the_smt_line_names_which_cores_share_a_physical_one(tmp_path):
    from benchmarks.cpu_census import smt_line

    interleaved = _topology(tmp_path / "a", {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert smt_line(interleaved) == "SMT siblings: 2 groups, e.g. 0,2; 1,3"
    alone = _topology(tmp_path / "b", {0: "0", 1: "1"})
    assert smt_line(alone) == "SMT siblings: none (2 cores, one thread each)"
    adjacent = _topology(tmp_path / "c", {2: "2-3", 3: "2-3", 10: "10-11", 11: "10-11"})
    assert smt_line(adjacent) == "SMT siblings: 2 groups, e.g. 2-3; 10-11"  # by first core, not as text
    assert smt_line(tmp_path / "none") == "SMT siblings: unknown (no topology in sysfs)"

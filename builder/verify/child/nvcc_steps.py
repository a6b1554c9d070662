"""nvcc's own steps, those that need not wait for each other side by side (child side, in the build's sandbox).

    PYTORCH_NVCC="python -m builder.verify.child.nvcc_steps"   (set by child/build.py; KA_REAL_NVCC names nvcc)

nvcc runs its steps one after another. For one `.cu` compiled (`-c`) for one GPU architecture, which is what a
build asks, nvcc 12.8 and later run seven, each parsing torch's headers again:

    host preprocessing (-E: .cpp4.ii) -> cudafe++ (.cudafe1.cpp, and the module id that cicc reads)
    device preprocessing (-E: .cpp1.ii) -> cicc (.ptx, and the stub .cudafe1.stub.c) -> ptxas -> fatbinary (.fatbin.c)
    host compile (-c .cudafe1.cpp, which includes the stub on its last lines; the stub includes the fatbin)

Here the device preprocessing runs beside the host's first two steps, and the host compile starts as soon as
cudafe++ is done: the `.cudafe1.cpp` line that includes the stub names a FIFO instead, and the FIFO gets the stub's
own include line once fatbinary is done. So the host compiler parses the translation unit (half its time) while
cicc runs, and blocks at its last lines until the stub and the fatbin exist, as nvcc would have written them.

Every step is nvcc's own command line as `nvcc -dryrun` prints it, run with nvcc's environment; the outputs are
printed in nvcc's order; a failed step ends the build with its exit status, and a step nvcc would not have reached
is stopped and its output dropped. Any other plan (several architectures, `-rdc`, a dependency file, an option
that changes the steps) or a dry run that fails runs nvcc itself: this is a schedule, never another compiler.

`KA_NVCC_TRACE` (a file): one JSON line a step, {"step", "start", "end", "returncode"} (monotonic seconds).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

REAL_NVCC_ENV = "KA_REAL_NVCC"
TRACE_ENV = "KA_NVCC_TRACE"
DRY_RUN_PREFIX = "#$ "
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
CUDA_TOOLS = ("cudafe++", "cicc", "ptxas", "fatbinary")
# nvcc's order of the steps this schedules (`Step.kind`).
KINDS = ("host_preprocess", "cudafe", "device_preprocess", "cicc", "ptxas", "fatbinary", "host_compile")
# Options with which nvcc does not compile one object the way the seven steps above describe.
NOT_SCHEDULED = frozenset({"-dryrun", "--dryrun", "-E", "--preprocess", "-M", "-MD", "-MM", "-MMD", "--time",
                           "-time", "-rdc", "--relocatable-device-code", "-dc", "--device-c", "-keep", "--keep",
                           "-ptx", "--ptx", "-cubin", "--cubin", "-fatbin", "--fatbin", "-lib", "--lib"})  # fmt: skip
FIFO_SUFFIX = ".fifo"
FIFO_POLL_S = 0.005


@dataclass
class Step:
    kind: str
    line: str  # the shell line, as nvcc printed it
    argv: list[str]
    process: subprocess.Popen | None = None
    log: IO[bytes] | None = None
    start: float = 0.0
    end: float = 0.0
    returncode: int | None = None


@dataclass
class Plan:
    env: dict[str, str] = field(default_factory=dict)  # nvcc's variables, as its steps see them
    steps: dict[str, Step] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # the kinds in nvcc's order


def _option_value(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def step_kind(argv: list[str]) -> str | None:
    """Which of the seven steps this command line is, or None for any other."""
    tool = os.path.basename(argv[0])
    if tool == "cudafe++":
        return "cudafe"
    if tool in CUDA_TOOLS:
        return tool
    output = _option_value(argv, "-o") or ""
    if "-E" in argv and output.endswith(".cpp4.ii"):
        return "host_preprocess"
    if "-E" in argv and output.endswith(".cpp1.ii"):
        return "device_preprocess"
    if "-c" in argv and any(arg.endswith(".cudafe1.cpp") for arg in argv):
        return "host_compile"
    return None


def parse_plan(dry_run: str) -> Plan | None:
    """The steps of `nvcc -dryrun`'s output, or None where they are not the seven this schedules."""
    plan = Plan()
    for raw in dry_run.splitlines():
        if not raw.startswith(DRY_RUN_PREFIX):
            continue
        line = raw[len(DRY_RUN_PREFIX) :].strip()
        if assignment := ASSIGNMENT.match(line):
            plan.env[assignment[1]] = assignment[2].strip()
            continue
        try:
            argv = shlex.split(line)
        except ValueError:
            return None
        kind = step_kind(argv) if argv else None
        if kind is None or kind in plan.steps:
            return None
        plan.steps[kind] = Step(kind, line, argv)
        plan.order.append(kind)
    if set(plan.steps) != set(KINDS):
        return None
    cudafe, cicc = plan.steps["cudafe"].argv, plan.steps["cicc"].argv
    if "--gen_module_id_file" not in cudafe or "--gen_module_id_file" in cicc:
        return None  # the module id comes from cicc (nvcc before 12.8): cudafe++ would wait for it
    return plan


class Schedule:
    """Runs a plan's steps: device preprocessing beside the host's first two, the host compile beside the device's."""

    def __init__(self, plan: Plan, workdir: Path) -> None:
        self.plan = plan
        self.env = {**os.environ, **plan.env}
        self.workdir = workdir
        self.fifo: Path | None = None

    def start(self, kind: str) -> Step:
        step = self.plan.steps[kind]
        step.log = tempfile.TemporaryFile(dir=self.workdir)
        step.start = time.monotonic()
        # A session of its own: a step stopped early is stopped with every process it started.
        step.process = subprocess.Popen(["sh", "-c", step.line], env=self.env, stdin=subprocess.DEVNULL,
                                        stdout=step.log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        return step

    def wait(self, kind: str) -> int:
        step = self.plan.steps[kind]
        if step.process is None:
            self.start(kind)
        assert step.process is not None
        step.returncode = step.process.wait()
        step.end = time.monotonic()
        return step.returncode

    def stop(self, kind: str) -> None:
        step = self.plan.steps[kind]
        if step.process is not None and step.process.poll() is None:
            try:
                os.killpg(step.process.pid, 9)
            except ProcessLookupError:
                pass
            step.process.wait()
        step.returncode = None  # stopped: nvcc would not have run it

    def point_stub_at_fifo(self) -> bool:
        """Make the `.cudafe1.cpp`'s include of the stub name a FIFO beside it; False where the line is not found."""
        cudafe = self.plan.steps["cudafe"].argv
        cicc = self.plan.steps["cicc"].argv
        translation_unit = _option_value(cudafe, "--gen_c_file_name")
        stub_name = _option_value(cudafe, "--stub_file_name")
        stub_path = _option_value(cicc, "--stub_file_name")
        if not (translation_unit and stub_name and stub_path):
            return False
        unit = Path(translation_unit)
        if Path(stub_path) != unit.parent / stub_name or not unit.is_file():
            return False
        include = f'#include "{stub_name}"'
        lines = unit.read_text(errors="surrogateescape").split("\n")
        found = [index for index, line in enumerate(lines) if line == include]
        if len(found) != 1:
            return False
        fifo = unit.parent / (stub_name + FIFO_SUFFIX)
        os.mkfifo(fifo)
        lines[found[0]] = f'#include "{fifo.name}"'
        unit.write_text("\n".join(lines), errors="surrogateescape")
        self.fifo = fifo
        return True

    def feed_fifo(self) -> None:
        """Give the waiting host compiler the stub's include line; nothing where it has already ended."""
        assert self.fifo is not None
        compiler = self.plan.steps["host_compile"].process
        stub_name = _option_value(self.plan.steps["cudafe"].argv, "--stub_file_name")
        while compiler is not None and compiler.poll() is None:
            try:
                descriptor = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: the compiler has not opened it yet
                    raise
                time.sleep(FIFO_POLL_S)
                continue
            try:
                os.set_blocking(descriptor, True)
                os.write(descriptor, f'#include "{stub_name}"\n'.encode())
            finally:
                os.close(descriptor)
            return

    def run(self) -> int:
        """Every step, in the order nvcc's results allow; the exit status nvcc would have given."""
        self.start("device_preprocess")
        for kind in ("host_preprocess", "cudafe"):
            if self.wait(kind):
                self.stop("device_preprocess")
                return self.plan.steps[kind].returncode or 1
        early_compile = self.point_stub_at_fifo()
        if early_compile:
            self.start("host_compile")
        for kind in ("device_preprocess", "cicc", "ptxas", "fatbinary"):
            if self.wait(kind):
                self.stop("host_compile")
                return self.plan.steps[kind].returncode or 1
        if early_compile:
            self.feed_fifo()
        return self.wait("host_compile")

    def report(self, out: IO[str]) -> None:
        """Each step's output in nvcc's order, up to the first that failed (its last word says a signal's end)."""
        trace = os.environ.get(TRACE_ENV)
        for kind in self.plan.order:
            step = self.plan.steps[kind]
            if step.returncode is None:
                continue
            if step.log is not None:
                step.log.seek(0)
                out.write(step.log.read().decode("utf-8", errors="replace"))
            if step.returncode < 0 or 128 < step.returncode <= 192:
                signal_number = -step.returncode if step.returncode < 0 else step.returncode - 128
                out.write(f"ka-compiler: {os.path.basename(step.argv[0])} killed by signal {signal_number}\n")
            if trace:
                with open(trace, "a") as handle:
                    handle.write(json.dumps({"step": kind, "start": step.start, "end": step.end,
                                             "returncode": step.returncode}) + "\n")  # fmt: skip
            if step.returncode:
                break
        out.flush()


def scheduled(argv: list[str]) -> bool:
    """Whether these options ask for the one-object compile this schedules (else nvcc runs alone)."""
    return "-c" in argv and not any(arg in NOT_SCHEDULED or arg.startswith("--time") for arg in argv)


def run_nvcc(nvcc: str, argv: list[str]) -> int:
    """`nvcc argv`, scheduled where its plan is the one this knows."""
    if not scheduled(argv):
        return subprocess.call([nvcc, *argv])
    workdir = Path(tempfile.mkdtemp(prefix="ka-nvcc-"))
    try:
        keep = workdir / "steps"
        keep.mkdir()
        dry = subprocess.run([nvcc, *argv, "-dryrun", "-keep", "-keep-dir", str(keep)],
                             capture_output=True, text=True, errors="replace")  # fmt: skip
        plan = parse_plan(dry.stderr) if dry.returncode == 0 else None
        if plan is None:
            return subprocess.call([nvcc, *argv])
        schedule = Schedule(plan, workdir)
        try:
            status = schedule.run()
        finally:
            for kind in plan.order:
                if plan.steps[kind].returncode is None:
                    schedule.stop(kind)
        schedule.report(sys.stdout)
        return status if 0 <= status < 256 else 128 + abs(status)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    nvcc = os.environ.get(REAL_NVCC_ENV)
    if not nvcc:
        print(f"ka-compiler: no compiler: {REAL_NVCC_ENV} is not set", file=sys.stderr)
        return 127
    return run_nvcc(nvcc, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

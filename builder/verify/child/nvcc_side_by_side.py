"""nvcc for one `.cu`, its host and device front ends side by side: a compile child's `PYTORCH_NVCC` (child side).

nvcc builds a `.cu` in steps, one after another, that `nvcc --dryrun` lists: preprocessing for the host, cudafe++
(the host front end), preprocessing for the device, cicc (the device front end), ptxas, fatbinary, then the host
compiler. Each front end parses the whole of the torch headers a kernel includes, and neither reads what the other
writes but one file: the module id, the name of the source's anonymous namespace on both sides, which cudafe++
makes and cicc reads. So this runs nvcc's own commands, as `--dryrun` prints them and with the environment it gives
them, after writing the module id itself: the host front end beside the device's chain, then the host compiler once
both are done. The same compilers run on the same inputs with the same flags; a build ends sooner by the shorter
of the two chains (docs/benchmarks.md, "nvcc's front ends side by side").

What it prints is what nvcc would: each step's output in nvcc's order, up to the first step that fails in that
order (a later one's is never seen), and nvcc's exit status is that step's. A step a signal ended (the kernel's
OOM killer, say) is also named, as `ka-cxx` names a host compiler's: nvcc itself leaves only its shell's "Killed",
and the line lets the builder tell its machinery's failure from the source's errors (`sandbox/suspects.py`).

Any plan of another shape (several GPU architectures, relocatable device code, a dependency file, only
preprocessing, a step it does not know, a `--dryrun` that fails) is nvcc's own run: it execs nvcc with the same
arguments. Standalone, the standard library only: ninja starts it for each `.cu` as
`python -I nvcc_side_by_side.py ARGS`, with the real nvcc in `KA_REAL_NVCC` (`child/build.py`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

REAL_NVCC_VARIABLE = "KA_REAL_NVCC"
SCRIPT_NAME = Path(__file__).name
# `#$ NAME=value`: a variable nvcc sets, verbatim after the "=", in the environment of every step it runs.
ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.DOTALL)
MODULE_ID_OPTION = "--module_id_file_name"
MAKE_MODULE_ID = re.compile(r"(?<=\s)--gen_module_id_file(?=\s|$)")  # cudafe++'s option to write the module id


@dataclass(frozen=True)
class Step:
    command: str  # a shell command line, as nvcc runs it
    tool: str  # its program's file name: gcc, cudafe++, cicc...


@dataclass(frozen=True)
class Plan:
    """nvcc's steps for one source, in its order, as two chains and the host compiler after them."""

    environment: dict[str, str]
    host_chain: list[Step]  # preprocessing for the host, cudafe++ (which no longer makes the module id)
    device_chain: list[Step]  # preprocessing for the device, cicc, ptxas, fatbinary
    host_compile: Step
    module_id_path: str
    module_id: str


@dataclass
class Ran:
    step: Step
    returncode: int  # the tool's (negative: the signal that ended it)
    stdout: bytes = b""
    stderr: bytes = b""


@dataclass
class Chain:
    """Steps run one after another, up to the first that fails, or until `stop`."""

    steps: list[Step]
    environment: dict[str, str]
    ran: list[Ran] = field(default_factory=list)
    stopped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    running: subprocess.Popen | None = None

    def run(self) -> None:
        for step in self.steps:
            with self.lock:
                if self.stopped:
                    return
                try:
                    # `exec`: the step is the shell's process, so that `stop` ends the tool itself, not only a
                    # shell whose tool would run on, holding the pipes open, to its end
                    self.running = subprocess.Popen(["/bin/sh", "-c", f"exec {step.command}"], env=self.environment,
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
                except OSError as exc:
                    self.ran.append(Ran(step, 127, stderr=f"{exc}\n".encode()))
                    return
            stdout, stderr = self.running.communicate()
            self.ran.append(Ran(step, self.running.returncode, stdout, stderr))
            if self.running.returncode != 0:
                return

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            if self.running is not None and self.running.poll() is None:
                self.running.kill()

    def ok(self) -> bool:
        return len(self.ran) == len(self.steps) and all(ran.returncode == 0 for ran in self.ran)


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return []


def _tool(command: str) -> str:
    words = _words(command)
    return os.path.basename(words[0]) if words else ""


def _option_value(words: list[str], option: str) -> str | None:
    for number, word in enumerate(words[:-1]):
        if word == option:
            return words[number + 1]
    return None


def module_id_for(source_path: str, source: bytes, arguments: list[str]) -> str:
    """A module id of nvcc's form, `_<8 hex>_<length>_<file name>_<suffix>` (nvcc's suffix is a hash or a name the
    source defines; this one's is a hash), from the source's path, its text and the arguments: the same build gets
    the same id, as with nvcc."""
    name = re.sub(r"\W", "_", os.path.basename(source_path))
    path_hash = hashlib.sha256(source_path.encode()).hexdigest()[:8]
    text_hash = hashlib.sha256(source + "\0".join(arguments).encode()).hexdigest()[:8]
    return f"_{path_hash}_{len(name)}_{name}_{text_hash}"


def plan_from_dryrun(listing: str, arguments: list[str], base_environment: dict[str, str]) -> Plan | None:
    """The plan of nvcc's `--dryrun` listing (its `#$ ` lines) where it has the one shape this runs side by side, else
    None (nvcc then runs as it is)."""
    lines = [line[3:] for line in listing.splitlines() if line.startswith("#$ ")]
    environment = dict(base_environment)
    commands: list[str] = []
    for line in lines:
        match = ASSIGNMENT.match(line)
        if match and not commands:
            environment[match["name"]] = match["value"]
        elif match:
            return None  # a variable set between steps: not the plan this knows
        else:
            commands.append(line)
    steps = [Step(command, _tool(command)) for command in commands]
    kept = [step for step in steps if step.tool != "rm"]
    if len(kept) != 7 or kept[0].tool != kept[2].tool or kept[0].tool != kept[6].tool:
        return None
    if [step.tool for step in kept[1:6]] != ["cudafe++", kept[0].tool, "cicc", "ptxas", "fatbinary"]:
        return None
    host_preprocess, cudafe, device_preprocess, cicc, ptxas, fatbinary, host_compile = kept
    if [steps.index(step) for step in kept[:6]] != list(range(6)) or steps[-1] is not host_compile:
        return None  # nvcc's `rm` of an intermediate file only between fatbinary and the host compiler
    host_words, device_words = _words(host_preprocess.command), _words(device_preprocess.command)
    if "-E" not in host_words or any(word.startswith("-D__CUDA_ARCH__=") for word in host_words):
        return None
    if "-E" not in device_words or not any(word.startswith("-D__CUDA_ARCH__=") for word in device_words):
        return None
    if "-c" not in _words(host_compile.command):
        return None
    cudafe_words, cicc_words = _words(cudafe.command), _words(cicc.command)
    module_id_path = _option_value(cudafe_words, MODULE_ID_OPTION)
    source_path = _option_value(cudafe_words, "--orig_src_path_name")
    if not module_id_path or not source_path or len(MAKE_MODULE_ID.findall(cudafe.command)) != 1:
        return None
    if MAKE_MODULE_ID.search(cicc.command):
        return None
    if _option_value(cicc_words, MODULE_ID_OPTION) != module_id_path:
        return None
    try:
        source = Path(source_path).read_bytes()
    except OSError:
        return None
    cudafe_reading = MAKE_MODULE_ID.sub("", cudafe.command)
    return Plan(
        environment=environment,
        host_chain=[host_preprocess, Step(cudafe_reading, cudafe.tool)],
        device_chain=[device_preprocess, cicc, ptxas, fatbinary],  # nvcc's `rm`s are of its own scratch files
        host_compile=host_compile,
        module_id_path=module_id_path,
        module_id=module_id_for(source_path, source, arguments),
    )


def run_plan(plan: Plan) -> int:
    """Run `plan`: both chains at once, the host compiler after them; print the steps' output as nvcc would (see the
    module's text) and return its exit status."""
    Path(plan.module_id_path).write_text(plan.module_id)
    host, device = Chain(plan.host_chain, plan.environment), Chain(plan.device_chain, plan.environment)
    device_thread = threading.Thread(target=device.run, daemon=True)
    device_thread.start()
    host.run()
    if not host.ok():
        device.stop()  # nvcc would not have started it
    device_thread.join()
    ran = host.ran + (device.ran if host.ok() else [])
    if host.ok() and device.ok():
        last = Chain([plan.host_compile], plan.environment)
        last.run()
        ran += last.ran
    for one in ran:
        sys.stdout.buffer.write(one.stdout)
        sys.stdout.buffer.flush()
        sys.stderr.buffer.write(one.stderr)
        sys.stderr.buffer.flush()
        if one.returncode != 0:
            status = one.returncode if one.returncode > 0 else 128 - one.returncode  # as a shell reports a signal
            if 128 < status <= 192:
                print(f"ka-compiler: {one.step.tool} killed by signal {status - 128}", file=sys.stderr)
            return status
    return 0


def main(arguments: list[str]) -> int:
    nvcc = os.environ.get(REAL_NVCC_VARIABLE, "")
    if not nvcc:
        print(f"nvcc_side_by_side: {REAL_NVCC_VARIABLE} names no nvcc", file=sys.stderr)
        return 2
    scratch = tempfile.mkdtemp(prefix="ka-nvcc-")
    try:
        # nvcc names its intermediate files after its own pid under TMPDIR: a directory of this build's own
        environment = {**os.environ, "TMPDIR": scratch}
        try:
            listing = subprocess.run([nvcc, "--dryrun", *arguments], env=environment, capture_output=True, text=True)
        except OSError:
            print(f"{nvcc}: not found", file=sys.stderr)  # as a shell says it
            return 127
        plan = plan_from_dryrun(listing.stderr, arguments, environment) if listing.returncode == 0 else None
        if plan is not None:
            return run_plan(plan)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    os.execv(nvcc, [nvcc, *arguments])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

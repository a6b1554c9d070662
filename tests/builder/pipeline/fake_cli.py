"""`kernel-archive` as shipped, its build and reverify handed a stand-in verifier of pipeline_fakes.py through their
Python API (`run_build(..., make_verifier=...)`, `run_reverify(..., make_verifier)`): for tests of what the commands
do around verification (exit codes, one-line errors, a process killed mid-build), fast and predictable.

    python fake_cli.py [--slowed SECONDS | --failing once|always] -- COMMAND [ARGS...]

Started by path, so this folder is first on sys.path; PYTHONPATH must name the checkout (pipeline_helpers.cli_env),
and this folder too where Ray's node engines import the fake.
"""

from __future__ import annotations

import argparse
import functools
import sys

from pipeline_fakes import FakeVerifier, MachineryFailingVerifier

from builder.cli import main as cli_main
from builder.pipeline import build, reverify_run


def main(argv: list[str]) -> None:
    ours, theirs = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else ([], argv)
    parser = argparse.ArgumentParser(prog="fake_cli.py")
    parser.add_argument("--slowed", type=float, default=0.0, help="seconds each pair takes")
    parser.add_argument("--failing", choices=("once", "always"), help="the machinery fails the first pair, or all")
    chosen = parser.parse_args(ours)
    if chosen.failing:
        verifier = MachineryFailingVerifier.failing(chosen.failing)
    else:
        verifier = FakeVerifier.slowed(chosen.slowed)
    # The commands import run_build / run_reverify from these modules when they run: bound here, they get the fake.
    build.run_build = functools.partial(build.run_build, make_verifier=verifier)
    reverify_run.run_reverify = functools.partial(reverify_run.run_reverify, make_verifier=verifier)
    sys.argv = ["kernel-archive", *theirs]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])

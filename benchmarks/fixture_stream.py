"""Every adversarial fixture of a backend through one `Verifier.stream` (the stream the adversarial GPU test runs),
each verdict checked against the manifest, each record kept, and which kernels were evaluated twice (an eager
slowed in a CUDA window is looked at again in a fresh child: `engine/one_kernel.finish_record`).

    python3 benchmarks/fixture_stream.py --label loaded --records R.jsonl   # on a GPU machine; --backend cpu too

One line per fixture (PASS or FAIL, status, evaluated twice or not, in-window and clean eager), then a summary;
exit 1 when a verdict is not the manifest's. Run it beside deliberate CPU load to see whether the honest controls
stay correct on one look (docs/benchmarks.md, "Verdicts on the GPU").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from builder import config  # noqa: E402
from tests.builder.verify.test_adversarial import assert_verdict, run_stream  # noqa: E402

# timing_method when the second look stood; the error when it was slowed_baseline too (one_kernel.finish_record)
SECOND_LOOK_SIGNS = (config.SECOND_LOOK_CLAUSE, "in the first evaluation")


def looked_twice(record: dict) -> bool:
    said = f"{record.get('timing_method') or ''} {record.get('error') or ''}"
    return any(sign in said for sign in SECOND_LOOK_SIGNS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--label", default="stream", help="a word for this run, at the head of every line")
    parser.add_argument("--records", type=Path, help="write every record here, one JSON line each")
    args = parser.parse_args(argv)
    started = time.monotonic()
    outcomes = run_stream(args.backend, Path(tempfile.mkdtemp(prefix="ka-fixture-stream-")))
    wall_s = time.monotonic() - started
    passed, twice = 0, 0
    records = []
    for name, outcome in sorted(outcomes.items()):
        record = outcome["record"]
        try:
            assert_verdict(name, outcome)
            verdict, why = "PASS", ""
        except AssertionError as exc:
            verdict, why = "FAIL", f" ({str(exc).splitlines()[0][:300]})"
        passed += verdict == "PASS"
        twice += looked_twice(record)
        records.append(record)
        print(f"{args.label} {verdict} {name}: {record['status']}, evaluated twice: {looked_twice(record)}, "
              f"eager {record.get('eager_ms')} ms, clean {record.get('eager_clean_ms')} ms{why}")  # fmt: skip
    if args.records:
        args.records.write_text("".join(json.dumps(record) + "\n" for record in records))
    print(
        f"{args.label}: {passed} of {len(outcomes)} as the manifest expects, {twice} evaluated twice, in {wall_s:.0f} s"
    )
    return 0 if passed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())

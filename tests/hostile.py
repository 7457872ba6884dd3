"""The attack set (hostile input of every kind) in one command, with one summary line at the end:

    python tests/hostile.py            # every hostile test file
    python tests/hostile.py --quick    # without the files that run workloads (torch, minutes)
    python tests/hostile.py -k names   # pytest's -k, passed through

prints pytest's own progress, then `hostile: 143 cases, 143 held` (and what was skipped, and
the node ids of the cases that broke). A case is one test item (one parameter set); a property
test counts once however many inputs it tries. Exit status 0 when every case held, else 1.

The files: malformed, oversized and hostile inputs (traces, side files, names, thresholds,
files that change while read, binary of any size), what the operating system refuses (a full
disk, a file-size limit, a deleted working folder, stdout on /dev/full), and the workload
families (output folders that only touch what diagnose wrote, exit codes that tell the truth,
no process outliving diagnose, rank workers included).
Each hostile test also checks, with tests/hostile_guard.py, that nothing outside its output
folder changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FILES = {  # file: what it attacks
    "test_hostile_input.py": "what may be opened, bombs, deep nesting, side-file schemas, far-off times",
    "test_bad_input.py": "unreadable and malformed targets",
    "test_adversarial.py": "hypothesis-built malformed traces (one case, many inputs)",
    "test_hostile_fields.py": "every field of every event missing, null or of another type",
    "test_hostile_reads.py": "a trace that shrinks, grows or is rewritten while it is read",
    "test_hostile_side_files.py": "size ceilings on every file read beside a trace, pyproject nesting",
    "test_threshold_ranges.py": "thresholds that would divide by zero, refused at --set time",
    "test_scale.py": "many tiny events: no per-kernel Python where an object column falls back to it",
    "test_hostile_names.py": "names that ping, link, inject HTML, forge lines or hold raw control and bidi "
    "bytes, in every format",
    "test_system_failures.py": "what the system refuses (full disk, ulimit -f, long paths, permissions, deleted "
    "folders, /dev/full and closed stdout, narrow encodings), binary and NUL inputs of any size",
}
WORKLOAD_FILES = {
    "test_output_folder.py": "outputs that only touch what diagnose wrote",
    "test_exit_codes.py": "exit codes that tell the truth, in every mode",
    "test_workload_lifecycle.py": "no process outlives diagnose",
}


class Tally:
    """Counts each test item once: broke if any phase failed, skipped, else held."""

    def __init__(self):
        self.outcome: dict[str, str] = {}

    def pytest_runtest_logreport(self, report):
        previous = self.outcome.get(report.nodeid)
        if report.failed:
            self.outcome[report.nodeid] = "broke"
        elif report.skipped and previous != "broke":
            self.outcome[report.nodeid] = "skipped"
        elif report.when == "call" and report.passed and previous is None:
            self.outcome[report.nodeid] = "held"

    def summary(self) -> str:
        values = list(self.outcome.values())
        held, skipped = values.count("held"), values.count("skipped")
        broke = sorted(node for node, outcome in self.outcome.items() if outcome == "broke")
        line = f"hostile: {len(values)} cases, {held} held"
        if skipped:
            line += f", {skipped} skipped"
        if broke:
            line += f", {len(broke)} broke: " + " ".join(broke)
        return line


def main(argv: list[str] | None = None) -> int:
    """Run the attack set; print the summary line last; 0 when every case held."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="leave out the files that run workloads")
    p.add_argument("-k", dest="keyword", help="only the cases matching this pytest -k expression")
    p.add_argument("-x", action="store_true", help="stop at the first case that breaks")
    args = p.parse_args(argv)
    files = list(FILES) + ([] if args.quick else list(WORKLOAD_FILES))
    pytest_args = [str(HERE / f) for f in files if (HERE / f).is_file()]
    pytest_args += ["-q", "-p", "no:cacheprovider", "--rootdir", str(HERE.parent)]
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    if args.x:
        pytest_args.append("-x")
    tally = Tally()
    code = pytest.main(pytest_args, plugins=[tally])
    print(tally.summary(), flush=True)
    held = all(outcome != "broke" for outcome in tally.outcome.values()) and tally.outcome
    return 0 if held and code in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) else 1


if __name__ == "__main__":
    sys.exit(main())

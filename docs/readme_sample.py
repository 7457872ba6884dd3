"""Write README.md's sample output from what `diagnose demo` really prints on a machine without a GPU.

The block between the markers below in README.md is generated, never typed: this script runs
`diagnose demo` (its no-GPU path, the bundled H200 capture) and keeps the lines up to the first
finding; tests/test_readme_sample.py fails when README.md differs from it. After a change to the
numbers or the text report, regenerate it:

    python docs/readme_sample.py
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN = "<!-- sample: `diagnose demo` without a GPU, written by docs/readme_sample.py -->"
END = "<!-- end of sample -->"


def demo_output() -> str:
    """stderr then stdout of `diagnose demo` on the no-GPU path, run in a scratch folder."""
    from diagnose.commands import main

    out, err = io.StringIO(), io.StringIO()
    with (
        tempfile.TemporaryDirectory() as scratch,
        mock.patch("diagnose.capture.probe.cuda_available", return_value=False),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(["demo", "--out", str(Path(scratch) / "demo")])
    if code not in (0, 1):
        raise RuntimeError(f"diagnose demo exited {code}: {err.getvalue()}")
    return err.getvalue() + out.getvalue()


def sample() -> str:
    """The README's sample: the demo's output up to the end of its first finding, the capture's
    folder shortened to …/fixtures/..., and an ellipsis for the rest."""
    lines = demo_output().splitlines()
    kept = []
    for line in lines:
        if kept and kept[-1].startswith("    ") and not line.strip() and any(k.startswith(" 1. ") for k in kept):
            break
        kept.append(line.replace(str(ROOT / "fixtures"), "…/fixtures"))
    return "\n".join(["```", *kept, " …", "```"])


def readme_block(text: str) -> str:
    """The generated block of README.md (between the markers)."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def main() -> None:
    """Rewrite the block in README.md."""
    text = README.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    README.write_text(text[:start] + "\n" + sample() + "\n" + text[end:])
    print(f"wrote the sample in {README}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""README.md's sample output is what `diagnose demo` prints (docs/readme_sample.py writes it)."""

from __future__ import annotations

import sys

from conftest import ROOT, diagnosis_of

sys.path.insert(0, str(ROOT / "docs"))
import readme_sample  # noqa: E402


def test_the_readme_sample_is_the_demo_output():
    shown = readme_sample.readme_block((ROOT / "README.md").read_text())
    assert shown == readme_sample.sample(), "run `python docs/readme_sample.py` to regenerate README.md's sample"


def test_the_readme_json_example_carries_the_demo_estimate():
    top = diagnosis_of(ROOT / "fixtures" / "captures" / "decode_eager").findings[0]  # analyze(), once a session
    text = (ROOT / "README.md").read_text()
    assert f'"est_speedup": {top.est_speedup}, "recoverable_us": {top.recoverable_us},' in text

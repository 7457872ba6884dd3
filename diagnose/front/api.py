"""The Diagnosis as notebooks and scripts get it from `diagnose.analyze()` and `diagnose.profile()`.

`Report` is the plain Diagnosis plus what a notebook wants: its HTML report as the cell's display,
and `render(format)` for any registered renderer. It lives above the renderers, so the model
(diagnose/model/findings.py) never imports them.
"""

from __future__ import annotations

import html

from diagnose import report
from diagnose.model.findings import Diagnosis


class Report(Diagnosis, frozen=True):
    """A Diagnosis that renders itself."""

    @classmethod
    def of(cls, diagnosis: Diagnosis) -> "Report":
        """The same diagnosis, as a Report (no copy of its data)."""
        return cls(**{name: getattr(diagnosis, name) for name in Diagnosis.__struct_fields__})

    def render(self, format: str = "text", **options) -> str:
        """The diagnosis as `format` ("text", "json", "html", "md": see `diagnose --help`)."""
        return report.get(format).render(self, **options)

    def _repr_html_(self) -> str:
        """Notebook display: the full report, isolated in an iframe so its styles stay its own."""
        return (
            f'<iframe srcdoc="{html.escape(self.render("html"), quote=True)}" '
            'style="width:100%;height:900px;border:1px solid #ddd"></iframe>'
        )

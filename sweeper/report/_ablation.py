"""An ablation's report: each switch's effect on TPS with its interval, as a plot and as tables.

``build_ablation_report(storage, name, out_dir)`` judges the stored
ablation the way ``sweeper status --ablation`` does (``analyse`` on the
servers stored so far, a running or interrupted one's too) and writes
into ``out_dir``::

    ablation.html   the forest plot, the verdicts, what the intervals rest on,
                    the closing race and the servers (self-contained, opens offline)
    effects.png     the forest plot as a PNG
    switches.csv    one row per switch; effects as ratios, subject over reference
    servers.csv     one row per server of the schedule that is stored
    summary.md      the verdicts and their figures

The forest plot has one row per switch: its TPS effect in percent (the
subject value's TPS over the reference value's, minus one) with the
interval as a horizontal bar, coloured by verdict, and a line at 0 %. A
switch whose arm never ran beside a base has no effect to draw: it is an
``x`` at 0 %. Trace names are the verdicts' words.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

from sweeper.report._ablation_data import AblationReportData, read_ablation
from sweeper.report._ablation_files import ablation_html, ablation_markdown, servers_csv, switches_csv
from sweeper.report._ablation_plot import forest_model
from sweeper.report._files import WrittenReport, write_text

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationReportFiles(WrittenReport):
    """What ``build_ablation_report`` wrote, and what a reader must know (``messages``)."""

    PAGE = "ablation.html"

    data: AblationReportData

    def to_dict(self) -> dict[str, object]:
        closing = self.data.closing
        return {
            "ablation": self.data.name,
            "out_dir": str(self.out_dir),
            "files": {name: str(path) for name, path in self.files.items()},
            "status": self.data.status,
            "messages": list(self.messages),
            "verdicts": {r.switch.label: r.verdict.value for r in self.data.result.reports},
            "changes": self.data.result.changes,
            "closing": closing.to_dict() if closing is not None else None,
        }


def build_ablation_report(storage: str | None, name: str, out_dir: str | Path | None = None) -> AblationReportFiles:
    """Write ablation ``name``'s report into ``out_dir`` (default ``./report-ablation-<name>``).

    Raises StudyNotFoundError (nothing written, no database created) for an
    unknown ablation and StudyError (nothing written) for one with no
    servers stored; a running or interrupted one gets the report of what
    is stored, with ``messages`` saying so.
    """
    from sweeper.report import _plotly, _png  # plotly and matplotlib: only where a figure is drawn

    data = read_ablation(storage, name)
    forest = forest_model(data)  # described once, drawn by plotly and as a PNG
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", data.name)
    out = Path(out_dir) if out_dir is not None else Path(f"report-ablation-{stem}")
    out = out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {
        "effects.png": _png.save_png(_png.draw_forest(forest), out / "effects.png"),
        "switches.csv": write_text(out / "switches.csv", switches_csv(data)),
        "servers.csv": write_text(out / "servers.csv", servers_csv(data)),
        "summary.md": write_text(out / "summary.md", ablation_markdown(data)),
    }
    page = ablation_html(data, _plotly.draw_forest(forest), files)
    files = {"ablation.html": write_text(out / "ablation.html", page), **files}
    logger.info("wrote the report of ablation %s to %s (%d files)", data.name, out, len(files))
    return AblationReportFiles(out_dir=out, files=files, data=data, messages=data.messages())

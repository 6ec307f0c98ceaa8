"""``build_report``: a study's report written into one folder, each figure described once and
drawn twice (plotly for the pages, matplotlib for the PNGs), each table written as a file."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from sweeper.manifest import Manifest
from sweeper.report._data import ReportData, assemble_report_data
from sweeper.report._figures import figure_models
from sweeper.report._files import WrittenReport, summary_markdown, trials_csv, write_text

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportFiles(WrittenReport):
    """What ``build_report`` wrote, and what a reader must know (``messages``)."""

    PAGE = "report.html"

    data: ReportData

    def to_dict(self) -> dict[str, object]:
        record = self.data.answer.record
        return {
            "study": self.data.study_name,
            "out_dir": str(self.out_dir),
            "files": {name: str(path) for name, path in self.files.items()},
            "winner": record.number if record else None,
            "winner_tps": self.data.answer_tps,  # its estimate after selection: the one figure shown
            "status": self.data.answer.status if record else None,
            "messages": list(self.messages),
        }


def build_report(
    storage: str | None,
    study_name: str | None = None,
    out_dir: str | Path | None = None,
    *,
    base_manifest: Manifest | None = None,
) -> ReportFiles:
    """Write the study's report into ``out_dir`` (default ``./report-<study>``).

    Raises StudyError (nothing written) for an unknown study or one with no
    trials; a study with no feasible or no verified trial still gets its
    report, with ``messages`` saying so.
    """
    from sweeper.report import _page, _plotly, _png

    data = assemble_report_data(storage, study_name, base_manifest=base_manifest)
    out = Path(out_dir) if out_dir is not None else Path(f"report-{data.study_name}")
    out = out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    models = figure_models(data)  # each figure described once, drawn by plotly and as PNGs
    figures = _plotly.draw_figures(models)
    # the Pareto plot also stands alone; every figure is in report.html
    files["pareto.html"] = _plotly.write_html(figures["pareto"], out / "pareto.html")
    for stem, path in _png.write_pngs(models, out).items():
        files[f"{stem}.png"] = path
    files["trials.csv"] = write_text(out / "trials.csv", trials_csv(data))
    files["summary.md"] = write_text(out / "summary.md", summary_markdown(data))
    page = _page.report_html(data, figures, files)
    files = {"report.html": write_text(out / "report.html", page), **files}
    logger.info("wrote the report of %s to %s (%d files)", data.study_name, out, len(files))
    return ReportFiles(out_dir=out, files=files, data=data, messages=tuple(data.messages()))

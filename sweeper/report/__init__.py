"""Reports: what a study found, as plots a person reads at a glance and files that keep.

``build_report(storage, study_name, out_dir)`` writes into ``out_dir``::

    report.html     the page that ties it together (self-contained, opens offline)
    pareto.html     TPS against PPL, interactive, on its own
    pareto.png      the same plots as PNG (also history.png, importance.png,
                    slice-<parameter>.png)
    trials.csv      one row per trial
    summary.md      the winner, its manifest changes, verification, time by phase

``build_ablation_report(storage, name, out_dir)`` does the same for an
ablation (``sweeper ablate``): ablation.html, effects.png, switches.csv,
servers.csv and summary.md (see ``_ablation``).

Modules: ``_data`` reads the study into ``ReportData`` (its trials and configurations
are ``_points``', the parameters' importance ``_importance``'s). ``_figures`` builds the
figure model (``_figure_model``) from it once, with ``_geometry`` (where the Pareto plot
puts things) and ``_placement`` (where a label goes); ``_plotly`` and ``_png`` only draw
that model. ``_tables`` is the table model that summary.md and the page both write;
``_files`` writes trials.csv and summary.md, ``_page`` report.html, and ``_html`` is the
page shell both reports share; ``_build`` ties them together. The ablation's report is
``_ablation``'s, from ``_ablation_data`` (the stored ablation), ``_ablation_plot`` (its
forest plot's model) and ``_ablation_files`` (its tables and page).
"""

from sweeper.report._ablation import AblationReportFiles, build_ablation_report
from sweeper.report._ablation_data import AblationReportData
from sweeper.report._build import ReportFiles, build_report
from sweeper.report._data import ReportData, assemble_report_data

__all__ = [
    "AblationReportData",
    "AblationReportFiles",
    "ReportData",
    "ReportFiles",
    "assemble_report_data",
    "build_ablation_report",
    "build_report",
]

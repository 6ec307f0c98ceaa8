"""trials.csv and summary.md: the report's tables, for spreadsheets and for reading."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
from pathlib import Path
from typing import Any, ClassVar

from sweeper.answer import tps_text
from sweeper.measure import duration_text, phase_headline, phase_rows
from sweeper.report._data import ReportData
from sweeper.report._tables import markdown_table, table_markdown, verification_table_model


@dataclasses.dataclass(frozen=True, kw_only=True)
class WrittenReport:
    """What a report builder wrote into ``out_dir`` (``files`` by name), and what a reader must
    know (``messages``); ``page``: the file a reader opens first (``PAGE``, named by each report)."""

    PAGE: ClassVar[str]

    out_dir: Path
    files: dict[str, Path]
    messages: tuple[str, ...]

    @property
    def page(self) -> Path:
        return self.files[self.PAGE]


def write_text(path: Path, text: str) -> Path:
    """Atomically: the file is the old one or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def _num(value: float | None, spec: str) -> str:
    if value is None:
        return ""
    if not math.isfinite(value):
        return "inf"
    return format(value, spec)


# how a trial's reading stands to its configuration's one figure (trials.csv's ``reading`` column)
COUNTED, SELECTING, NOT_COUNTED = "counted", "selected it: not counted", "not counted"


def reading_role(data: ReportData, number: int) -> str:
    """Whether trial ``number``'s reading is one of those its configuration's figure is made of
    (``counted``), the reading that picked the configuration for a race (never counted), or
    another reading left out (the base's outside the claim's rounds); '' off the configurations."""
    now = data.answer.standing
    config = now.configuration_of(number) if now is not None else None
    if now is None or config is None:
        return ""
    if number in now.counted(config):
        return COUNTED
    # a reading before any re-measurement of a configuration other than the base picked it
    return SELECTING if not config.is_base and number not in config.confirmed else NOT_COUNTED


def trials_csv(data: ReportData) -> str:
    """One row per trial: outcome, verification, each parameter in its own column.

    ``tps`` is the trial's own reading; ``tps_estimate`` its configuration's one figure
    (the one every output states), and ``reading`` whether this reading is counted in it.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = [
        "number",
        "state",
        "category",
        "role",
        "tps",
        "tps_estimate",
        "reading",
        "ppl",
        "ppl_cap",
        "tps_imputed",
        "early_stopped",
        "verification",
        "pareto",
        "winner",
        "seconds",
        "error",
    ]
    header += [f"param:{name}" for name in data.param_names]
    writer.writerow(header)
    winner = data.answer.record.number if data.answer.record else None
    for point in data.points:
        config = data.configuration_of(point.number)
        row: list[Any] = [
            point.number,
            point.state,
            point.category,
            point.role,
            _num(point.tps, ".4f"),
            _num(config.tps if config is not None else None, ".4f"),
            reading_role(data, point.number),
            _num(point.ppl, ".6f"),
            _num(data.cap, ".6f"),
            int(point.tps_imputed),
            int(point.early_stopped),
            point.verification or "",
            int(point.number in data.pareto),
            int(point.number == winner),
            f"{point.seconds:.2f}",
            point.error or "",
        ]
        row += [_cell(point.params.get(name)) for name in data.param_names]
        writer.writerow(row)
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def _head_lines(data: ReportData) -> list[str]:
    """The title, where the study is, its mode and cap, its trials, and the notes a reader must see."""
    counts = data.counts
    lines = [
        f"# Study `{data.study_name}`",
        "",
        f"- storage: `{data.storage}`",
        f"- mode: {data.mode}; PPL cap: {_cap_text(data)}",
        f"- trials: {len(data.points)} ({data.searched} searched, {data.race_servers} race servers; "
        f"{counts.get('feasible', 0)} feasible, "
        f"{counts.get('infeasible', 0)} infeasible, {counts.get('FAIL', 0)} failed)",
        "",
    ]
    for message in data.messages():
        lines += [f"> **Note:** {message}", ""]
    return lines


def _cap_text(data: ReportData) -> str:
    return f"{data.cap:.4f}" if data.cap is not None else "not set yet"


def _winner_lines(data: ReportData) -> list[str]:
    """The winner: its figures, its claim, its parameters, and how its manifest differs from the base."""
    lines = ["## Winner", ""]
    record = data.answer.record
    if record is None:
        return lines + ["No trial passed the PPL cap: there is no winner.", ""]
    lines += [
        f"Trial **#{record.number}** ({record.role}): **{data.answer.status.upper()}**",
        "",
        f"- TPS {data.answer_tps_text()}, PPL {record.ppl:.4f} (cap {_cap_text(data)})",
    ]
    claim, noise, ppl = data.claim_line(), data.noise_line(), data.winner_ppl()
    lines += [f"- {ppl.text()}"] if ppl is not None else []
    lines += [f"- claim: {claim}"] if claim else []
    lines += [f"- noise: {noise}"] if noise else []
    lines += [f"- `{name}` = `{value}`" for name, value in record.params.items()]
    lines += ["", "### How its manifest differs from the base", ""]
    if data.env_changes:
        base = f" `{data.base_name}`" if data.base_name else ""
        lines += markdown_table(
            ["env", f"base{base}", "winner"],
            [
                [f"`{c.key}`", f"`{c.base}`" if c.base is not None else data.unset_label, f"`{c.answer}`"]
                for c in data.env_changes
            ],
        )
    else:
        lines.append("No difference: the base manifest's own values won.")
    return lines + [""]


def _front_lines(data: ReportData) -> list[str]:
    """The Pareto front: the configurations at their estimates, else (no standing) each trial's reading."""
    params = data.param_names
    if data.configurations:
        return markdown_table(
            ["trial", "TPS", "interval", "servers", "PPL", *params],
            [
                [
                    f"#{c.first}" + (" (answer)" if c.is_answer else "") + (" (base)" if c.is_base else ""),
                    c.tps_text(),
                    f"{c.level} {c.low:.1f}-{c.high:.1f}",
                    f"{len(c.counted)}" + (" after selection" if len(c.counted) < len(c.readings) else ""),
                    _num(c.ppl, ".4f"),
                    *(_cell(c.params.get(n)) for n in params),
                ]
                for c in data.configuration_front()
            ],
        )
    if data.pareto:
        return markdown_table(
            ["trial", "TPS", "PPL", *params],
            [
                [
                    f"#{p.number}",
                    tps_text(p.tps) if p.tps is not None else "",
                    _num(p.ppl, ".4f"),
                    *(_cell(p.params.get(n)) for n in params),
                ]
                for p in (data.point(n) for n in data.pareto)
            ],
        )
    return ["Empty: no feasible trial."]


def _time_lines(data: ReportData) -> list[str]:
    if not data.time.phases:
        return ["No phase timings were recorded."]
    return [phase_headline(data.time) + ".", ""] + markdown_table(
        ["phase", "time", "share", "per server"],
        phase_rows(data.time) + [["**total**", duration_text(data.time.total_s), "100%", ""]],
    )


def _importance_lines(data: ReportData) -> list[str]:
    if not data.importance:
        return [f"Not available: {data.importance_note}."]
    targets = list(data.importance)
    return [
        "On measured values only: a TPS imputed for a trial stopped early or refused is left out.",
        "",
    ] + markdown_table(
        ["parameter", *(f"for {t.upper()}" for t in targets)],
        [[n, *(f"{data.importance[t].get(n, 0.0):.3f}" for t in targets)] for n in data.param_names],
    )


def summary_markdown(data: ReportData) -> str:
    """The winner, how its manifest differs from the base, verification, time by phase."""
    lines = _head_lines(data) + _winner_lines(data)
    lines += ["## Verification on held-out data", ""] + table_markdown(verification_table_model(data))
    lines += ["", "## Pareto front (gate-passing configurations)", ""] + _front_lines(data)
    lines += ["", "## Where the time went", ""] + _time_lines(data)
    lines += ["", "## Parameter importance", ""] + _importance_lines(data)
    return "\n".join(lines + [""])

"""How trials read: the trial table (the Pareto set of ``sweeper status``) and one trial in
detail (``sweeper status --trial N``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.console import Console, JustifyMethod
from rich.measure import Measurement
from rich.table import Table

from storage import TrialRecord
from sweeper.cli._formats import number_text, params_text
from sweeper.cli._standing_view import configuration_figure
from sweeper.study import PplStatement, Standing, ppl_statement, probability_text

LOG_TAIL_LINES = 20


def print_trial_table(
    console: Console, title: str, records: tuple[TrialRecord, ...], settings: Mapping[str, Any] | None = None
) -> None:
    """The trial table, one line per row at the console's width (a file is 80 columns).

    When the params do not fit beside the figures, the table leaves them out and
    one line per trial below it names them: never a params cell folded over lines.
    """
    table = trial_table(title, records, settings)
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    console.print(trial_table(title, records, settings, params=False))
    for record in records:
        console.print(f"  trial {record.number}: {params_text(record.params)}", markup=False, highlight=False)


def trial_table(
    title: str, records: tuple[TrialRecord, ...], settings: Mapping[str, Any] | None = None, *, params: bool = True
) -> Table:
    """Trials with TPS, PPL and cap; with the PPL's interval and re-run chance where known."""
    statements = {r.number: ppl_statement(r.ppl, r.extras, r.ppl_cap, settings or {}) for r in records}
    uncertain = any(s is not None and s.known for s in statements.values())
    table = Table(title=title, title_justify="left")
    columns: list[tuple[str, JustifyMethod]] = [("trial", "right"), ("TPS", "right"), ("PPL", "right")]
    if uncertain:
        columns += [("PPL 95 %", "right"), ("P(pass)", "right")]
    columns.append(("cap", "right"))
    if params:
        columns.append(("params", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for record in records:
        row = [str(record.number), number_text(record.tps, 2), number_text(record.ppl, 4)]
        if uncertain:
            row += _uncertainty_cells(statements[record.number])
        row.append(number_text(record.ppl_cap, 4))
        table.add_row(*row, *([params_text(record.params)] if params else []))
    if uncertain:
        reruns = sorted({s.rerun_records for s in statements.values() if s and s.rerun_records})
        table.caption = (
            "PPL 95 %: the interval of the records' PPL; P(pass): the chance that a re-run on "
            f"{'/'.join(map(str, reruns)) or 'as many'} new records of this kind is under the cap"
        )
        if any(s and s.paired for s in statements.values()):
            table.caption += ", judged against the baseline on the same records"
        elif any(s and s.baseline_noise for s in statements.values()):
            table.caption += ", the baseline's record noise included"
    return table


def _uncertainty_cells(statement: PplStatement | None) -> list[str]:
    if statement is None or not statement.known:
        return ["-", "-"]
    assert statement.low is not None and statement.high is not None
    chance = statement.pass_probability
    return [
        f"{statement.low:.4f}-{statement.high:.4f}",
        "-" if chance is None else probability_text(chance),
    ]


def show_trial(
    console: Console, record: TrialRecord, settings: Mapping[str, Any] | None = None, now: Standing | None = None
) -> None:
    """One trial in detail: its params and env overrides, TPS and PPL against the cap, its
    configuration's figure, the error of a failed trial, phase timings and its server log's tail."""
    console.print(f"trial {record.number} of {record.study_name}: {record.state} ({record.role})")
    console.print(f"params: {params_text(record.params)}")
    if record.overrides:
        console.print(f"env overrides: {json.dumps(dict(record.overrides))}")
    if record.tps is not None or record.ppl is not None:
        verdict = "passes the gate" if record.feasible else "fails the gate"
        extra = []
        if record.ppl_reused_from is not None:
            extra.append(f"PPL reused from trial {record.ppl_reused_from}")
        if record.tps_imputed:
            extra.append("TPS not measured (stopped early)")
        console.print(
            f"TPS {number_text(record.tps, 2)} (this server's reading), PPL {number_text(record.ppl, 4)} "
            f"(cap {number_text(record.ppl_cap, 4)}): {verdict}" + (f"; {'; '.join(extra)}" if extra else "")
        )
        figure = configuration_figure(now, record.number)
        if figure is not None:
            counted = "is one of those it is made of" if figure["this_reading_counted"] else "is not counted"
            console.print(
                f"configuration of trial {figure['trial']}: {figure['text']}; this reading {counted}",
                markup=False,
                highlight=False,
            )
        statement = ppl_statement(record.ppl, record.extras, record.ppl_cap, settings or {})
        if statement is not None and statement.known:
            console.print(statement.text(), markup=False, highlight=False)
        low, high = record.extras.get("tps_low"), record.extras.get("tps_high")
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            console.print(
                f"TPS 95 % interval within this server: {low:.2f}-{high:.2f} "
                f"({record.extras.get('tps_interval', 'bootstrap over requests')}); a fresh "
                f"server moves it by the between-server spread (see the study's 'noise' line)"
            )
    if record.error_kind:
        console.print(f"error: {record.error_kind}: {record.error_message}")
    if record.phases:
        console.print("phases: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in record.phases))
    if record.requests:
        console.print(f"per-request rows: {len(record.requests)}")
    console.print(f"worker: pid {record.pid} on {record.host}; server token {record.server_token or '-'}")
    if record.log_tail:
        lines = record.log_tail.splitlines()[-LOG_TAIL_LINES:]
        console.print(f"server log, last {len(lines)} lines:", markup=False)
        console.print("\n".join(lines), markup=False, highlight=False)

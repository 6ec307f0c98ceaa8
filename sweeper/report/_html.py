"""The parts every report page shares: its style, the scripts that record how it rendered, the shell.

Each page inlines plotly.js once (no network needed) and draws each figure
in a div. A small script records any JavaScript error in ``data-errors``
and the number of drawn plots in ``data-plots`` on ``<body>``, so a
headless browser's DOM dump tells whether the page rendered cleanly.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from sweeper.report._plotly import PLOT_CONFIG

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d3557;
       background: #f8f9fa; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { margin-bottom: 4px; } .sub { color: #555; margin-top: 0; }
.cards { display: flex; gap: 16px; flex-wrap: wrap; margin: 16px 0; }
.card { background: #fff; border-radius: 8px; padding: 12px 18px; box-shadow: 0 1px 3px #0002;
        min-width: 150px; }
.card .v { font-size: 1.6em; font-weight: 600; } .card .k { color: #666; font-size: .85em; }
.note { background: #fff3cd; border-left: 4px solid #ffb703; padding: 8px 12px; margin: 8px 0; }
.verified { color: #2a9d8f; font-weight: 700; } .failed, .unverified { color: #d62828; font-weight: 700; }
section { background: #fff; border-radius: 8px; padding: 12px 18px; margin: 18px 0;
          box-shadow: 0 1px 3px #0002; }
table { border-collapse: collapse; font-size: .9em; } td, th { padding: 4px 10px;
        border-bottom: 1px solid #ddd; text-align: left; }
.figure { min-height: 300px; } img { max-width: 100%; } code { background: #eef; padding: 0 3px; }
"""

WATCH_ERRORS = """
window.__sweeperErrors = [];
window.addEventListener('error', function (e) {
  window.__sweeperErrors.push(String(e.message || e.type));
});
"""

REPORT_STATE = """
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('.figure .js-plotly-plot .main-svg').length > 0
    ? document.querySelectorAll('.figure .js-plotly-plot').length : 0;
  document.body.setAttribute('data-plots', String(plots));
  document.body.setAttribute('data-errors', window.__sweeperErrors.join(' | '));
});
"""


def escape(value: object) -> str:
    return html.escape(str(value))


def html_table(header: list[str], rows: list[list[str]]) -> str:
    """A table of ``header`` (escaped here) and ``rows`` (cells already HTML)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure_div(name: str, fig: go.Figure) -> str:
    """``fig`` drawn by the page's plotly.js, in a div the render check counts."""
    div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}", config=PLOT_CONFIG)
    return f'<div class="figure" data-figure="{escape(name)}">{div}</div>'


def html_page(title: str, main: str) -> str:
    """A whole self-contained page: ``title`` (escaped here) and ``main``, the body's HTML."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{STYLE}</style>
<script>{WATCH_ERRORS}</script>
<script>{get_plotlyjs()}</script>
</head><body data-plots="" data-errors="">
<main>
{main}
</main>
<script>{REPORT_STATE}</script>
</body></html>
"""

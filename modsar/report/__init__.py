"""`modsar report`: the ModSAR paper's AE-vs-AR tables (4, 5, 6), statistics and plots from Parquet rows.

A cell is the test metric of the configuration selected by validation for (dataset, space, task): the mean ±
std over its seed re-runs (`--seeds K` in search) when there are any, else the selected trial's own value.
Rows are combined into one cell only when they are replicas: the same experiment and the same config except
the seed (checked; a mismatch is refused, never averaged). When two experiments cover the same (dataset,
space), each experiment gets its own section: experiments are never blended. Every report ends with its
sources (experiment, trial ids and seeds of every cell). Missing cells stay missing ("–"), never 0. In Table
5/6 layouts the better of each AE/AR pair is underlined, the best AE and the best AR of a row are bold, and
Best Improv. = (best AR − best AE) / best AE. With seeds on both sides, a paired t-test over the common seeds
gives p and n.

The modules, in the order data flows through them: `arms` (what a (dataset, space) compares: AE/AR or
models), `cells` (rows into cells and their statistics), `protocol` (which experiments may share a table),
`tables` and `verdicts` (what a report says), `build` (rows into reports), `formats` (a report rendered in
md, latex, csv or html), `plots` (its figures) and `files` (its --out folder: a report replaces the previous
report's files there).
"""

from modsar.report.build import Report, build_reports
from modsar.report.cells import METRICS, REPORT_KEYS, Cell, collect
from modsar.report.formats import render
from modsar.report.plots import plot_all
from modsar.report.protocol import PROTOCOL
from modsar.report.tables import Table

__all__ = [
    "METRICS",
    "PROTOCOL",
    "REPORT_KEYS",
    "Cell",
    "Report",
    "Table",
    "build_reports",
    "collect",
    "plot_all",
    "render",
]

"""The report's sections in order. Each area's renderer lives in its own module."""

from __future__ import annotations

from clustereval.report.markdown import Document
from clustereval.report.render import RunView, SectionFn


def header(view: RunView, doc: Document) -> None:
    """Title, datetime / access / nodes lines, raw-logs pointer, TOC."""
    from clustereval.report.environment import write_header

    write_header(view, doc)


def _order() -> list[SectionFn]:
    from clustereval.report.compute import render_compute
    from clustereval.report.environment import render_environment
    from clustereval.report.network import render_network
    from clustereval.report.preflight import render_preflight, render_setup_leftovers
    from clustereval.report.storage import render_storage

    return [render_preflight, render_environment, render_compute, render_network, render_storage,
            render_setup_leftovers]


ORDER: list[SectionFn] = _order()

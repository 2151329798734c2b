"""Header and Environment section (the environment helper owns the full version)."""

from __future__ import annotations

from clustereval.report.markdown import Document
from clustereval.report.render import RunView, SectionResult


def write_header(view: RunView, doc: Document) -> None:
    n = len(view.get("preflight").nodes) if view.get("preflight") else 1
    doc.para(f"# Cluster eval: {n} node{'s' if n != 1 else ''}")
    doc.bullets([f"Datetime (UTC): {view.stamp}", f"Access: {view.access}"])
    doc.para(f"Raw logs: [`{view.raw_rel}/`]({view.raw_rel}/).")
    doc.para("## Table of Contents")
    doc.toc_here()


def render_environment(view: RunView, doc: Document) -> SectionResult:
    return SectionResult()

"""The close-out: after the report is written, every Gap quoted with its proposed plan of action
and every Needs-operator-input question, or that the eval is complete. Pure; the CLI prints it
and the run saves it as ``closeout.md`` in the raw folder.
"""

from __future__ import annotations

from clustereval.report.render import Rendered


def closeout_text(rendered: Rendered, title: str = "") -> str:
    """Markdown for the console and ``closeout.md``."""
    head = f"# Close-out: {title}" if title else "# Close-out"
    questions = [f for f in rendered.findings if f.category == "needs_input"]
    gaps = list(rendered.gaps)
    extra = list(rendered.questions)
    if not gaps and not questions and not extra:
        return (f"{head}\n\nThe eval is complete: nothing is missing, and every measurement had a target to be "
                "judged against.\n")
    count = len(gaps) + len(questions) + len(extra)
    lines = [head, "",
             f"{count} open item{'s' if count != 1 else ''}. The eval is finished when each one has a plan that was "
             "carried out, or is accepted as it is."]
    if gaps:
        lines += ["", "## Gaps", ""]
        for n, gap in enumerate(gaps, 1):
            where = f" ({gap.node})" if gap.node else ""
            lines += [f"{n}. > {gap.text}{where}", "",
                      f"   Proposed plan of action: {gap.plan or 'accept as-is'}", ""]
    if questions:
        lines += ["", "## Needs operator input", ""]
        for n, f in enumerate(questions, 1):
            label = f"**{f.subsystem}** — " if f.subsystem else ""
            lines += [f"{n}. > {label}{f.text}", "",
                      "   Proposed plan of action: ask the operator for the figures above; add them to cluster.toml "
                      "and re-render with `clustereval report RUN_DIR`, or drop the question.", ""]
    if extra:
        lines += ["", "## Questions", ""]
        lines += [f"{n}. {q}" for n, q in enumerate(extra, 1)]
    return "\n".join(lines).rstrip() + "\n"

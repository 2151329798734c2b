"""matplotlib for the report's plots, loaded only when a plot is drawn (headless backend)."""

from __future__ import annotations


def pyplot():  # noqa: ANN201 - matplotlib.pyplot, or None where matplotlib is not installed
    """``matplotlib.pyplot`` on the Agg backend, or None: a report renders without its plots then."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt

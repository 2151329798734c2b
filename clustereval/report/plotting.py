"""matplotlib for the report's plots, loaded only when a plot is drawn (headless backend), and the
memo of plots already drawn in this process.

A plot is a pure function of its inputs, and one process often renders the same records more than once
(a report, then its JUnit or summary; a resumed run; a diff of two runs that share phases): drawing a
plot takes a tenth of a second or more, so ``memo_png`` keeps the last ``MEMO_PLOTS`` PNGs by a digest
of exactly what was drawn and hands the same bytes back for the same inputs.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
from collections import OrderedDict
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")

MEMO_PLOTS = 48  # PNGs kept (tens of KB each)
_drawn: OrderedDict[bytes, bytes | None] = OrderedDict()


def pyplot():  # noqa: ANN201 - matplotlib.pyplot, or None where matplotlib is not installed
    """``matplotlib.pyplot`` on the Agg backend, or None: a report renders without its plots then."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def memo_png(draw: Callable[P, bytes | None]) -> Callable[P, bytes | None]:
    """``draw`` (records in, PNG bytes out) drawn once per distinct input in this process. The key is
    a digest of the function's name and the pickled arguments, so two inputs share a PNG only when
    every value drawn is the same; an input that cannot be pickled is simply drawn."""

    @functools.wraps(draw)
    def memoised(*args: P.args, **kwargs: P.kwargs) -> bytes | None:
        try:
            blob = pickle.dumps((draw.__module__, draw.__qualname__, args, sorted(kwargs.items())), protocol=5)
        except (pickle.PicklingError, TypeError, AttributeError):
            return draw(*args, **kwargs)
        key = hashlib.sha256(blob).digest()
        if key in _drawn:
            _drawn.move_to_end(key)
            return _drawn[key]
        png = draw(*args, **kwargs)
        _drawn[key] = png
        while len(_drawn) > MEMO_PLOTS:
            _drawn.popitem(last=False)
        return png

    return memoised

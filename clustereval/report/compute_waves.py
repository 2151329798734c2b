"""The GPU performance section's words for the whole-wave search (``clustereval.analysis.waves``):
what each stage timed and for how long, which statistic MAMF is, and how MSMF was ranked and held.

Pure: records in, sentences out.
"""

from __future__ import annotations

from clustereval.records.compute import MatmulRecord, NodeMatmul, SearchStage, SearchSummary, ShapeTiming

LAYOUT_WORDS = {"nn": "`nn`, B stored K×N", "tn": "`tn`, B stored N×K and read transposed"}


def is_waves(search: SearchSummary | None) -> bool:
    return search is not None and search.mode == "waves"


def _stage(search: SearchSummary, name: str) -> SearchStage | None:
    return next((st for st in search.stages if st.name == name), None)


def _count(st: SearchStage | None, noun: str = "measurement") -> str:
    n = st.num_timings if st else 0
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _shape(shape: tuple[int, int, int] | None) -> str:
    return "×".join(str(v) for v in shape) if shape else ""


def wave_method(search: SearchSummary, mm: MatmulRecord, loaded: str) -> str:
    """The method paragraph's opening for a whole-wave search (the caller adds the siblings' words)."""
    tile = f"{search.tile[0]}×{search.tile[1]}"
    confirm = _stage(search, "confirm")
    num_confirm = (confirm.num_timings // 2) if confirm else 0
    text = ("Compute is measured by timing matrix multiplication (`matmul`). How fast a `matmul` runs depends on its "
            "**matmul shape**, the M×N×K dimensions (an M×K matrix times a K×N matrix), so `matmul.py` searches for "
            f"the fastest. On GPU0 it timed {search.shapes_tried} matmul shapes in {mm.dtype}, built for its "
            f"{search.sm_count} streaming multiprocessors (SMs): the output is computed in tiles of {tile} elements, one tile per SM at a time, "
            "so an M×N whose tile count is a whole multiple of the SM count keeps every SM busy to the last wave "
            "of tiles (a whole-wave family).")
    text += (f" For MAMF it timed the squarest whole-wave families briefly ({_count(_stage(search, 'screen'))}, at "
             f"least {search.screen_min_iters} timed iterations each), refined the leaders on K, on orientation "
             f"(N×M) and on the neighbouring wave counts ({_count(_stage(search, 'refine'))}), then timed the "
             f"{num_confirm} fastest shapes again in both operand layouts ({LAYOUT_WORDS['nn']}; "
             f"{LAYOUT_WORDS['tn']}) for at least {search.confirm_min_iters} timed iterations and "
             f"{search.confirm_min_s * 1e3:.0f} ms each. In those timings every matmul follows an overwrite of the "
             "L2 cache and a re-randomised output matrix and is timed alone"
             + (f", and the GPU idles after it for as long as it computed ({search.burst_duty:.0%} duty), so the board "
                "stays under its power limit and the clock at boost." if search.burst_duty < 1 else "."))
    if search.reference is not None:
        text += (" For MSMF it held whole-wave families back to back at the power limit, without the cache "
                 f"overwrite, in rungs of about a second ({_count(_stage(search, 'ladder'))}): each "
                 f"candidate between rungs of a reference shape, {_shape(search.reference)}, held again and again, "
                 "and ranked by its rate divided by the reference's at the same moment, so the board heating or "
                 "cooling during the ladder cannot pick the winner; the two best were held again in both layouts "
                 f"and at a larger K, the best one also turned (N×M). The winner was then held until its clock settled (at least {mm.settle_s:g} s, "
                 f"the board already at its power limit) and timed for {search.held_window_s:g} s: MSMF is the "
                 "median of that window, and a shape whose rate moved by more than "
                 f"{100 * search.max_drift_frac:.1f}% from the window's first half to its second is labelled "
                 f"UNSTEADY and cannot be MSMF{loaded}.")
    return text + " " + stage_times(search)


def stage_times(search: SearchSummary) -> str:
    parts = [f"{st.name} {st.seconds:.1f} s" for st in search.stages]
    return f"The stages took {', '.join(parts)}; the whole search {search.total_s:.1f} s." if parts else ""


def mamf_statistic(t: ShapeTiming) -> str:
    """What the MAMF figure is: the mean of its confirm timing, with the fastest iteration beside it."""
    return (f"the mean of {t.iterations} timed iterations, its fastest iteration {t.max_tflops:.0f} TFLOPS, "
            f"layout `{t.layout}`")


def msmf_sentences(n: NodeMatmul, single_gpu: bool) -> list[str]:
    """How GPU0's MSMF shape won the ladder and what its held window read."""
    s = n.search
    if not is_waves(s) or s is None or s.msmf is None:
        return []
    m = s.msmf
    ladder = [t for t in s.sustained if t.stage == "hot" and t.ref_ratio]
    out = []
    if s.reference is not None and ladder:
        ahead = 100 * (s.msmf_ratio - 1)
        versus = ("it is the reference shape itself" if abs(ahead) < 0.005 and m.shape == s.reference
                  and m.layout == s.reference_layout else f"{ahead:+.1f}% against the reference {_shape(s.reference)}")
        out.append(f"On the ladder {len({(t.shape, t.layout) for t in ladder})} shape and layout pairs were held; "
                   f"the MSMF shape {_shape(m.shape)} in layout `{m.layout}` ranked first ({versus}).")
    board = (f" at {m.power_w:.0f} W / {m.sm_mhz:.0f} MHz / {m.temp_c:.0f} °C"
             if m.power_w is not None and m.sm_mhz is not None and m.temp_c is not None else "")
    out.append(f"Its held window on GPU0: median {m.median_tflops:.1f} TFLOPS over {m.window_s:.0f} s after "
               f"{m.soak_s:.0f} s of settling{board}, drift {100 * m.drift_frac:+.2f}% from the first half to the "
               "second" + ("." if single_gpu else "; every other GPU measured the same shape in the same layout."))
    return out

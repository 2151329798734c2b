"""``summary.json`` -> JUnit XML of the verdicts, in the Ant/Jenkins form CI systems read. Pure.

One test case per subsystem verdict and one per Gap. A subsystem with an Underperforming finding
is a failed case, its message the report's own sentences; Needs operator input and a Gap are
skipped cases (nothing could be judged), with the sentence and the plan as the message; a Healthy
subsystem passes. A third suite holds the fleet-relative statistics, one case per kind of figure
and peer group.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

SUITE_VERDICTS = "clustereval.verdicts"
SUITE_GAPS = "clustereval.gaps"
SUITE_FLEET = "clustereval.fleet"
_RANK = {"underperforming": 0, "needs_input": 1, "healthy": 2}


def _subsystems(summary: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for v in summary.get("verdicts", []):
        groups.setdefault(v.get("subsystem") or "run", []).append(v)
    return list(groups.items())


def _case(suite: ET.Element, classname: str, name: str, seconds: float = 0.0) -> ET.Element:
    return ET.SubElement(suite, "testcase", {"classname": classname, "name": name, "time": f"{seconds:.3f}"})


def _suite(root: ET.Element, name: str, run_id: str, stamp: str) -> ET.Element:
    return ET.SubElement(root, "testsuite", {"name": name, "id": str(len(root)), "package": run_id,
                                             "hostname": "clustereval", "timestamp": stamp})


def _count(suite: ET.Element) -> tuple[int, int, int]:
    cases = suite.findall("testcase")
    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    suite.set("time", "0.000")
    return len(cases), failures, skipped


def _iso(summary: dict[str, Any]) -> str:
    """The run's start as xs:dateTime without a zone (the Ant schema's timestamp form)."""
    started = summary.get("run", {}).get("started_utc", "") or ""
    return started.rstrip("Z") if len(started) >= 19 else "1970-01-01T00:00:00"


def _fleet_suite(root: ET.Element, summary: dict[str, Any], run_id: str, stamp: str) -> ET.Element:
    """One case per kind of figure and peer group: failed when a unit is slower than its peers at the
    stated confidence, skipped when the group was too small or had nothing to judge by, else passed."""
    suite = _suite(root, SUITE_FLEET, run_id, stamp)
    props = ET.SubElement(suite, "properties")
    for key, value in (summary.get("verdict_policy") or {}).items():
        ET.SubElement(props, "property", {"name": key, "value": str(value)})
    for g in summary.get("fleet", []):
        name = g["kind"] + (f" ({g['group']})" if g.get("group") else "")
        case = _case(suite, SUITE_FLEET, name)
        if g.get("slow"):
            message = "; ".join(f"{u['subject']} {u['shortfall_frac'] * 100:.1f}% below the median of "
                                f"{g['num_units']} peers ({g['median']} {g['unit']}), p = {u['p_value']:.2g}"
                                for u in g["slow"])
            ET.SubElement(case, "failure", {"message": message, "type": "SlowerThanPeers"}).text = message
        elif not g.get("judged"):
            ET.SubElement(case, "skipped", {"message": f"not judged: {g.get('why_not') or 'nothing to judge by'}"})
        # the statistics ride in the case's output (the Ant schema gives a case no properties)
        ET.SubElement(case, "system-out").text = "\n".join(
            f"{key}: {g.get(key)}" for key in ("num_units", "median", "unit", "mad", "noise_frac", "noise_basis",
                                               "noise_df", "detectable_frac", "judged", "why_not"))
    ET.SubElement(suite, "system-out").text = f"fleet-relative verdicts of {run_id}"
    ET.SubElement(suite, "system-err").text = ""
    return suite


def _judged_line(j: dict[str, Any]) -> str:
    """One figure and the rule that decided it (analysis/rules.py), as summary.json carries it."""
    return (f"{'met' if j.get('met') else 'MISSED'} {j.get('rule')}: {j.get('subject')} {j.get('value')} {j.get('unit')}"
            f" against the bar {j.get('bar')} ({j.get('fraction')} of {j.get('target')} from {j.get('source')})")


def junit_xml(summary: dict[str, Any]) -> str:
    run_id = summary.get("run", {}).get("id", "") or "clustereval"
    stamp = _iso(summary)
    root = ET.Element("testsuites", {"name": f"clustereval {run_id}"})
    verdicts = _suite(root, SUITE_VERDICTS, run_id, stamp)
    ET.SubElement(verdicts, "properties")
    for sub, items in _subsystems(summary):
        worst = min(items, key=lambda v: _RANK.get(v.get("category", ""), 3))
        category = worst.get("category", "")
        same = [v["text"] for v in items if v.get("category") == category]
        case = _case(verdicts, SUITE_VERDICTS, sub)
        message = " ".join(same)
        if category == "underperforming":
            ET.SubElement(case, "failure", {"message": message, "type": "Underperforming"}).text = message
        elif category == "needs_input":
            ET.SubElement(case, "skipped", {"message": "Needs operator input: " + message})
        ET.SubElement(case, "system-out").text = "\n".join(
            [f"{v.get('verdict', '')}: {v['text']}" for v in items]
            + [_judged_line(j) for v in items for j in v.get("judged") or []])
    ET.SubElement(verdicts, "system-out").text = f"verdicts of {run_id}"
    ET.SubElement(verdicts, "system-err").text = ""
    gaps = _suite(root, SUITE_GAPS, run_id, stamp)
    ET.SubElement(gaps, "properties")
    for i, g in enumerate(summary.get("gaps", []), 1):
        text = g.get("text", "")
        case = _case(gaps, SUITE_GAPS, f"{g.get('phase') or 'run'} gap {i}: {text[:80]}")
        plan = g.get("plan", "")
        ET.SubElement(case, "skipped", {"message": text + (f" Plan: {plan}" if plan else "")})
    ET.SubElement(gaps, "system-out").text = f"gaps of {run_id}"
    ET.SubElement(gaps, "system-err").text = ""
    fleet = _fleet_suite(root, summary, run_id, stamp)
    totals = [_count(s) for s in (verdicts, gaps, fleet)]
    root.set("tests", str(sum(t[0] for t in totals)))
    root.set("failures", str(sum(t[1] for t in totals)))
    root.set("errors", "0")
    root.set("skipped", str(sum(t[2] for t in totals)))
    root.set("time", "0.000")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

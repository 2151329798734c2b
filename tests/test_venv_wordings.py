"""The eval Python's build and the scratch folders, failed for real on this machine, worded and linted.

Every case below makes a real failure (no python3 on PATH, a python3 that cannot start, pip with no
index, pip told to install for the user, a venv without torch, a cache folder that cannot be made,
a cache or a user folder another uid owns or others can write, a reused run folder that is not the
user's alone), lets the phase code record it exactly as a run does (``EvalPythonPhase``'s own
steps, ``each_node``'s Gap, the storage phase's refusal), and renders every Gap it recorded where
the report puts it, through every rule of ``clustereval lint``: the words are the code's and the
tools', never a sentence this test wrote."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from clustereval.phases.evalpython import EvalPythonPhase, not_newest_gap, note_refused
from clustereval.phases.pernode import each_node
from clustereval.phases.scratch import scratch_for
from clustereval.phases.venvcache import VenvKey, cache_place, look
from clustereval.records import Gap
from clustereval.records.run import EvalPythonRecord
from clustereval.report.gaps import say
from clustereval.report.lint import lint_text
from tests.conftest import path_without
from tests.storagehelpers import make_ctx
from tests.test_venv_cache_ownership import OTHER_UID
from tests.test_wordings_generated import report_with

URL = "https://download.pytorch.org/whl/cpu"
NEWEST = "9.9.9"  # listed by the index, never installable here: every build below fails
OFFLINE = ["--no-index", "--disable-pip-version-check"]


def _setup(how: str, tmp_path: Path, monkeypatch) -> tuple[dict, tuple[str, ...], list[str]]:  # noqa: ANN001
    """What ``how`` breaks: config fields, the torch requirement and pip's arguments."""
    spec, pip_args, config = ("torch",), OFFLINE, {}
    if how == "no-python3":
        monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "python3"))
    elif how == "python3-cannot-start":
        monkeypatch.setenv("PYTHONHOME", str(tmp_path / "no-such-home"))
    elif how == "pip-for-the-user":
        monkeypatch.setenv("PIP_USER", "1")
    elif how == "no-torch-in-it":
        spec = ("pip",)  # installed already: pip succeeds, importing torch fails
    elif how == "cache-cannot-be-made":
        (tmp_path / "local" / "notafolder").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "local" / "notafolder").write_text("")
        config = {"scratch_root": "notafolder/{user}"}
    return config, spec, pip_args


def _plant(how: str, ctx) -> None:  # noqa: ANN001 - a RunContext
    place = cache_place(ctx.config)
    look(ctx, ctx.nodes[0], place.user_folder, place.root, "0" * 16)  # the folders, made as a run makes them
    if how == "cache-of-another-uid":
        os.chown(place.root, OTHER_UID, OTHER_UID)
    elif how == "cache-group-writable":
        os.chmod(place.root, 0o775)
    elif how == "user-folder-of-another-uid":
        os.chown(place.user_folder, OTHER_UID, OTHER_UID)


BUILD_FAILURES = ["pip-offline", "pip-for-the-user", "no-torch-in-it", "no-python3", "python3-cannot-start",
                  "cache-cannot-be-made", "cache-of-another-uid", "cache-group-writable",
                  "user-folder-of-another-uid"]


def _recorded_gaps(how: str, tmp_path: Path, monkeypatch) -> tuple[list[Gap], EvalPythonRecord]:  # noqa: ANN001
    config, spec, pip_args = _setup(how, tmp_path, monkeypatch)
    ctx = make_ctx(tmp_path, local=tmp_path / "local", **config)
    if how in ("cache-of-another-uid", "cache-group-writable", "user-folder-of-another-uid"):
        if os.geteuid() != 0:
            pytest.skip("a folder of another uid needs chown (root)")
        _plant(how, ctx)
    phase = EvalPythonPhase()
    rec = EvalPythonRecord(index_kind="pytorch", index_tag="cpu", index_url=URL, newest_on_index=NEWEST)
    gaps: list[Gap] = []
    # every builder's own step, as ``_build_venv`` runs it: the node's error Gap, and a refused cache's Gap
    place = cache_place(ctx.config)
    key = VenvKey(index=URL, torch_spec=spec, packages=(), python="3", python_executable="python3")
    steps, refusals = phase._find_or_build(ctx, rec, place, key, pip_args, ctx.nodes, f"installing {spec[0]}")
    gaps += [s.gap for s in steps if s.gap is not None] + refusals
    assert all(not s.ok for s in steps), "each case is a build that fails"
    # the whole chain step, as the PyTorch index's step runs it, then the Gaps that carry its reason
    assert not phase._build_venv(ctx, rec, pip_args, list(spec))
    note_refused(rec, NEWEST, URL)
    rec.torch = torch.__version__
    gaps.append(not_newest_gap(rec, [f"torch=={NEWEST}"]))
    node_python = dataclasses.replace(rec, gaps=[], tried=list(rec.tried))
    phase._node_python(ctx, node_python)  # the chain's last step: this machine's python3, or its failure
    gaps += node_python.gaps
    return gaps, rec


@pytest.mark.timeout(600)
@pytest.mark.parametrize("how", BUILD_FAILURES)
def test_a_failed_eval_python_build_is_worded_lint_clean(tmp_path, monkeypatch, how):
    gaps, rec = _recorded_gaps(how, tmp_path, monkeypatch)
    assert rec.refused_why and rec.tried
    assert any(g.kind in ("node.error", "evalpython.cache-refused") for g in gaps)
    failures = []
    for gap in gaps:
        text = say(gap).text
        problems = lint_text(report_with(gap))
        if problems:
            failures.append(f"{gap.kind}: {text!r}: " + "; ".join(f"[{p.rule}] {p.message}" for p in problems))
        assert "clustereval-venvs" not in text + say(gap).plan, text  # the cache's path stays in the raw record
    assert not failures, "\n".join(failures)


def test_the_real_reasons_reach_the_gaps(tmp_path, monkeypatch):
    """What the cases above render is the failure's own line, not a placeholder."""
    gaps, rec = _recorded_gaps("pip-for-the-user", tmp_path, monkeypatch)
    assert "site-packages are not visible in this virtualenv" in rec.refused_why
    (error,) = [g for g in gaps if g.kind == "node.error"]
    assert error.facts["message"].startswith("pip install: ERROR: Can not perform a '--user' install")
    assert "site packages are not visible in this virtual environment" in say(error).text


SCRATCH_FAILURES = ["reused-run-folder-of-another-uid", "reused-user-folder-group-writable",
                    "new-user-folder-of-another-uid", "new-user-folder-group-writable", "mount-missing",
                    "no-room"]


def _scratch_failure(how: str, tmp_path: Path):  # noqa: ANN202 - (RunContext, mount, the failing step)
    local = tmp_path / "local"
    ctx = make_ctx(tmp_path, local=local)
    user = local / "evaluser"
    mount = str(local)
    if how.startswith("reused-"):
        area = scratch_for(ctx).ensure(ctx.nodes[0], mount)
        if how == "reused-run-folder-of-another-uid":
            os.chown(area.path, OTHER_UID, OTHER_UID)
        else:
            os.chmod(user, 0o775)
        ctx.scratch = None  # a resumed run
    elif how == "new-user-folder-of-another-uid":
        user.mkdir()
        os.chown(user, OTHER_UID, OTHER_UID)
    elif how == "new-user-folder-group-writable":
        user.mkdir(mode=0o775)
        os.chmod(user, 0o775)
    elif how == "mount-missing":
        mount = str(tmp_path / "not-mounted")
        ctx = make_ctx(tmp_path / "other", local=local, shared=(Path(mount),))
    if how == "no-room":
        def step(node):  # noqa: ANN001, ANN202 - what the storage phase asks before a scan
            area = scratch_for(ctx).ensure(node, mount)
            short = scratch_for(ctx).space(node, area.path).avail_bytes + 2**30  # a mount 1 GiB short
            return scratch_for(ctx).require_space(node, area.path, short, "the 16 KiB to 1 GiB scan")
    else:
        def step(node):  # noqa: ANN001, ANN202
            return scratch_for(ctx).ensure(node, mount)
    if os.path.exists(tmp_path / "not-mounted"):
        os.rmdir(tmp_path / "not-mounted")
    return ctx, mount, step


@pytest.mark.parametrize("how", SCRATCH_FAILURES)
def test_a_refused_scratch_folder_is_worded_lint_clean(tmp_path, how):
    """A scratch folder refused for real, as ``each_node`` and the storage phase record it."""
    if os.geteuid() != 0:
        pytest.skip("a folder of another uid needs chown (root)")
    ctx, mount, step = _scratch_failure(how, tmp_path)
    (done,) = each_node(ctx, "storage", "Storage", ctx.nodes, step, what="`fio`")
    assert done.gap is not None and done.error is not None, how
    scan = Gap(phase="storage", node=ctx.nodes[0].name, kind="storage.scan-refused",
               facts={"path": mount, "message": done.error.message, "hint": done.error.hint or ""})
    for gap in (done.gap, scan):
        problems = lint_text(report_with(gap))
        assert problems == [], f"{say(gap).text!r}: {problems}"


def test_the_example_re_rendered_with_a_failed_build_is_lint_clean(tmp_path, monkeypatch):
    """The example run's records with the Gaps of a real failed build added, re-rendered by
    ``clustereval report``: lint passes (a lint failure is our own defect, exit 3)."""
    import json
    import shutil

    from clustereval.records import to_dict
    from tests.conftest import run_cli

    gaps, _rec = _recorded_gaps("pip-for-the-user", tmp_path / "build", monkeypatch)
    monkeypatch.delenv("PIP_USER")
    example = Path(__file__).resolve().parents[1] / "examples"
    (raw,) = example.glob("raw-*")
    copy = tmp_path / "reports" / raw.name
    shutil.copytree(raw, copy)
    shutil.copy(example / f"{raw.name.removeprefix('raw-')}.md", copy.parent)
    record = copy / "evalpython.record.json"
    data = json.loads(record.read_text())
    data["gaps"] = data.get("gaps", []) + [to_dict(g) for g in gaps]
    record.write_text(json.dumps(data, indent=2))
    res = run_cli("report", str(copy), cwd=tmp_path)
    assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: the run's own findings; never 3
    report = (copy.parent / f"{raw.name.removeprefix('raw-')}.md").read_text()
    (error,) = [g for g in gaps if g.kind == "node.error"]
    assert say(error).text in report
    assert run_cli("lint", str(copy.parent / f"{raw.name.removeprefix('raw-')}.md"), cwd=tmp_path).returncode == 0

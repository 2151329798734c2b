"""fio argv and JSON parsing, on the real fio JSON captured on a 2x H200 machine."""

import json

import pytest

from clustereval.analysis.storage import cell_key
from clustereval.probes import fio
from clustereval.records.storage import FILE_SIZES
from clustereval.report.units import fmt_bw, fmt_iops_m, fmt_latency

SEED_PARAMS = ["--ioengine=libaio", "--ramp_time=2s", "--time_based", "--runtime=3m", "--numjobs=16", "--direct=1",
               "--verify=0", "--randrepeat=0", "--group_reporting", "--unlink=1", "--blocksize=4k", "--iodepth=64",
               "--output-format=json"]


@pytest.mark.parametrize("size,spelled", [(16 * 2**10, "16k"), (2**20, "1m"), (2**30, "1g")])
@pytest.mark.parametrize("rw", ["read", "write"])
def test_production_argv_is_the_published_recipe(size, spelled, rw):
    argv = fio.fio_argv("/code/u/cluster-eval-x/fio-test", size, rw, fio.PUBLISHED_RUNTIME_S)
    assert argv[0] == "fio"
    for param in SEED_PARAMS:
        assert argv.count(param) == 1, param
    assert f"--filesize={spelled}" in argv and f"--readwrite={rw}" in argv
    assert "--directory=/code/u/cluster-eval-x/fio-test" in argv
    extra = set(argv[1:]) - set(SEED_PARAMS) - {f"--filesize={spelled}", f"--readwrite={rw}",
                                                "--directory=/code/u/cluster-eval-x/fio-test", f"--name={rw}"}
    assert extra == set()
    # global options before the job name, as fio's JSON groups them
    assert argv.index("--unlink=1") < argv.index(f"--name={rw}") < argv.index("--blocksize=4k")


def test_runtime_spelling():
    assert fio.runtime_arg(180) == "3m"
    assert fio.runtime_arg(10) == "10s"
    assert fio.runtime_arg(90) == "90s"
    with pytest.raises(ValueError):
        fio.fio_argv("/d", 2**20, "randread", 10)


def test_each_job_holds_one_file_of_the_size():
    assert fio.bytes_written_at_once(2**30) == 16 * 2**30


@pytest.mark.parametrize("spelled,size,_label", FILE_SIZES)
@pytest.mark.parametrize("rw", ["read", "write"])
def test_parse_the_captured_runs(fixtures, spelled, size, _label, rw):
    text = (fixtures / "h200x2" / "fio" / f"fio-{rw}-{spelled}.json").read_text()
    doc = json.loads(text)
    side = doc["jobs"][0][rw]
    s = fio.parse_fio_json(text)
    assert s.rw == rw and s.file_size == spelled and s.error == 0
    assert s.latency_msec == pytest.approx(side["lat_ns"]["mean"] / 1e6)
    assert s.bw_mib_s == pytest.approx(side["bw_bytes"] / 2**20)
    assert s.iops == pytest.approx(side["iops"])
    assert s.runtime_ms > 0 and s.fio_version.startswith("fio-")
    assert cell_key(size, rw) in {"16KiB-read", "16KiB-write", "1MiB-read", "1MiB-write", "1GiB-read", "1GiB-write"}


def test_figures_match_the_published_reference_table(fixtures):
    # the reference table of these six runs (fio 3.42, /tmp on the root ext4 volume)
    expected = {("16k", "read"): ("3.7", "1_095.4", "0.280"), ("16k", "write"): ("2.5", "1_626.3", "0.416"),
                ("1m", "read"): ("4.0", "996.4", "0.255"), ("1m", "write"): ("2.6", "1_565.9", "0.401"),
                ("1g", "read"): ("3.9", "1_014.9", "0.260"), ("1g", "write"): ("2.8", "1_402.0", "0.359")}
    for (spelled, rw), (lat, bw, iops) in expected.items():
        s = fio.parse_fio_json((fixtures / "h200x2" / "fio" / f"fio-{rw}-{spelled}.json").read_text())
        assert (fmt_latency(s.latency_msec), fmt_bw(s.bw_mib_s, True), fmt_iops_m(s.iops)) == (lat, bw, iops)


def test_warnings_before_the_json_are_skipped(fixtures):
    text = (fixtures / "h200x2" / "fio" / "fio-write-1m.json").read_text()
    s = fio.parse_fio_json("fio: this platform does not support process shared mutexes, forcing use of threads\n" + text)
    assert s.rw == "write" and s.bw_mib_s > 0


@pytest.mark.parametrize("bad", ["", "fio: looks like your file system does not support direct=1\n",
                                 '{"fio version": "fio-3.33", "jobs": []}', "{not json"])
def test_unusable_output_is_an_error(bad):
    with pytest.raises(fio.FioOutputError):
        fio.parse_fio_json(bad)

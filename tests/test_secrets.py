"""A credential planted in torch_index and in a mount option appears in no file of the run folder and
in no console line."""

import os
import subprocess
import sys

import pytest

from clustereval.redact import findmnt_table, mount_options, mount_table, scrub
from tests.conftest import run_cli

TOKEN = "PlantedTok3n9x7"


def test_scrub_blanks_url_credentials_and_credential_options():
    assert scrub(f"https://user:{TOKEN}@mirror.example/whl/cu130") == "https://***@mirror.example/whl/cu130"
    assert scrub(f"pip --index-url https://{TOKEN}@h/x failed") == "pip --index-url https://***@h/x failed"
    assert TOKEN not in scrub(f"//srv/share /mnt cifs rw,username=bob,password={TOKEN},vers=3.0 0 0")
    assert scrub("10.0.0.1@tcp:/fs /code lustre rw,flock 0 0") == "10.0.0.1@tcp:/fs /code lustre rw,flock 0 0"
    assert mount_options(f"rw,vers=4.2,rsize=1048576,sec=sys,secretfile=/x,token={TOKEN}") == "rw,vers=4.2,rsize=1048576"
    assert TOKEN not in mount_table(f"fuse /mnt fuse.s3 rw,bucket={TOKEN} 0 0\n")
    table = f"TARGET SOURCE FSTYPE OPTIONS\n/mnt ov overlay rw,lowerdir=/x/{TOKEN}\n"
    assert findmnt_table(table) == "TARGET SOURCE FSTYPE OPTIONS\n/mnt ov overlay rw\n"


def _files_holding(root, needle: bytes) -> list[str]:
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                data = fh.read()
            if needle in data:
                found.append(path)
            if name.endswith(".tar.gz"):
                listing = subprocess.run(["tar", "-xzOf", path], capture_output=True).stdout
                if needle in listing:
                    found.append(path + " (inside)")
    return found


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the planted overlay needs root")
def test_a_planted_token_reaches_no_file_and_no_console_line(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    low, up, work, mnt = (tmp_path / "ov" / n for n in (TOKEN, "up", "work", "mnt"))
    for d in (low, up, work, mnt):
        d.mkdir(parents=True)
    opts = f"lowerdir={low},upperdir={up},workdir={work}"
    res = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(mnt)], capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"cannot mount an overlay here: {res.stderr.strip()}")
    try:
        assert TOKEN in open("/proc/mounts").read()  # the token really is in a mount option
        # a wheel index that answers (so the URL is used, stored and shown) and has no real wheel
        index = tmp_path / "index" / "whl" / "cpu" / "torch"
        index.mkdir(parents=True)
        (index / "index.html").write_text('<a href="torch-99.0.0-py3-none-any.whl">torch-99.0.0-py3-none-any.whl</a>')
        server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1",
                                   "--directory", str(tmp_path / "index")], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        port = _served_port(server)
        cfg = tmp_path / "cluster.toml"
        cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\n'
                       f'torch_index = "http://evaluser:{TOKEN}@127.0.0.1:{port}/whl"\n')
        # pip's own configuration gives no torch either (no config files, an index that refuses), so the
        # run goes on to the node's python3 without a venv build of minutes
        no_pip_index = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "",
                        "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
        run = run_cli("run", "--config", str(cfg), "--profile", "smoke", "--phases", "evalpython,environment",
                      cwd=tmp_path, timeout=600, env=no_pip_index)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        if "server" in locals():
            server.kill()
            server.wait()
    console = run.stdout + run.stderr
    assert "run folder:" in console, console[-3000:]
    assert TOKEN not in console
    assert _files_holding(tmp_path / "reports", TOKEN.encode()) == []
    assert any((tmp_path / "reports").rglob("env/*/findmnt.txt"))
    # the URL was used, stored and shown: with its credentials blanked
    assert "torch 99.0.0" in console and f"http://***@127.0.0.1:{port}/whl/cpu" in console
    (record,) = (tmp_path / "reports").rglob("evalpython.record.json")
    assert f"http://***@127.0.0.1:{port}/whl/cpu" in record.read_text()


def _served_port(server) -> int:
    line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
    return int(line.split(" port ")[1].split()[0])


def test_published_tool_sources_stay_byte_exact_while_other_raw_files_are_scrubbed(tmp_path):
    """tools/ is the code that produced the numbers: `key=lambda` must not become `key=***` there."""
    from pathlib import Path

    import clustereval.analysis.matmul as search
    from clustereval.store import RunStore

    store = RunStore.create(tmp_path, "vm")
    source = Path(search.__file__).read_bytes()
    assert b"key=lambda" in source
    store.write_raw("tools/matmul_search.py", source)
    assert (store.raw_dir / "tools" / "matmul_search.py").read_bytes() == source
    store.write_raw("env/notes.txt", f"mount opts password={TOKEN},key=lambda\n")
    written = (store.raw_dir / "env" / "notes.txt").read_text()
    assert TOKEN not in written and "password=***" in written

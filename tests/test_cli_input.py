"""Bad input on the command line: each case is its exact message, exit 2 and no traceback.

Every case runs the real CLI as a subprocess, the way a user meets it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

REPORT_HINT = "  hint: lint checks a report clustereval wrote: clustereval lint reports/<name>-<YYYY-MM-DD-HHMMZ>.md"


def _bad(proc) -> list[str]:
    """The stderr lines of a bad-input exit, after checking what every one of them shares."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "error[internal]" not in proc.stderr
    return proc.stderr.strip().splitlines()


def test_lint_a_missing_file(tmp_path):
    lines = _bad(run_cli("lint", "missing.md", cwd=tmp_path, timeout=60))
    assert lines == ["error[file-not-found]: missing.md: no such file", REPORT_HINT]


def test_lint_a_binary_file(tmp_path):
    lines = _bad(run_cli("lint", "/usr/bin/true", cwd=tmp_path, timeout=60))
    assert lines == ["error[not-text]: /usr/bin/true:1: not a text file: it holds binary data (a NUL byte), so it "
                     "is not a report", REPORT_HINT]


def test_lint_a_non_utf8_file_names_the_line(tmp_path):
    (tmp_path / "latin1.md").write_bytes(b"# Cluster eval: 1 node of 1\xd7 H200\n")
    lines = _bad(run_cli("lint", "latin1.md", cwd=tmp_path, timeout=60))
    assert lines == ["error[not-text]: latin1.md:1: not a text file: byte 0xd7 is not UTF-8, so it is not a report",
                     REPORT_HINT]


def test_lint_refuses_a_file_that_is_not_a_report(tmp_path):
    lines = _bad(run_cli("lint", str(REPO / "pyproject.toml"), cwd=tmp_path, timeout=60))
    assert lines == [f"error[not-a-report]: {REPO / 'pyproject.toml'}:1: not a clustereval report (it starts "
                     "'[build-system]', not `# Cluster eval: …`)", REPORT_HINT]


def test_lint_refuses_a_directory(tmp_path):
    lines = _bad(run_cli("lint", str(tmp_path), cwd=tmp_path, timeout=60))
    assert lines == [f"error[not-a-file]: {tmp_path}: is a directory, not a report", REPORT_HINT]


def test_lint_still_checks_a_report_whose_title_is_wrong(tmp_path):
    # the header lines say it is a report: lint runs and names the title problem (exit 1, not 2)
    text = (REPO / "examples" / "vm-2026-12-03-1439Z.md").read_text().replace("# Cluster eval:", "# Cluster:", 1)
    (tmp_path / "r.md").write_text(text)
    proc = run_cli("lint", "r.md", cwd=tmp_path, timeout=60)
    assert proc.returncode == 1 and "[title]" in proc.stdout, proc.stdout + proc.stderr


def test_init_in_a_folder_that_cannot_be_written(tmp_path):
    lines = _bad(run_cli("init", "/proc/foo.toml", cwd=tmp_path, timeout=60))
    assert lines == ["error[cannot-write]: /proc/foo.toml: cannot create it (No such file or directory)",
                     "  hint: pick a folder you can write, e.g. clustereval init cluster.toml"]


def test_init_with_a_directory_path_writes_nothing(tmp_path):
    lines = _bad(run_cli("init", "some-dir/", cwd=tmp_path, timeout=60))
    assert lines == ["error[path-is-directory]: some-dir/: is a directory; a file name is needed",
                     "  hint: name the file inside it, e.g. clustereval init some-dir/cluster.toml"]
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "existing").mkdir()
    lines = _bad(run_cli("init", "existing", cwd=tmp_path, timeout=60))
    assert lines[0] == "error[path-is-directory]: existing: is a directory; a file name is needed"
    assert list((tmp_path / "existing").iterdir()) == []


def test_init_with_an_empty_path(tmp_path):
    lines = _bad(run_cli("init", "", cwd=tmp_path, timeout=60))
    assert lines == ["error[empty-path]: the path is empty",
                     "  hint: give a file name, e.g. clustereval init cluster.toml"]
    assert list(tmp_path.iterdir()) == []


def test_init_refuses_to_overwrite(tmp_path):
    (tmp_path / "cluster.toml").write_text("mine\n")
    lines = _bad(run_cli("init", cwd=tmp_path, timeout=60))
    assert lines == ["error[file-exists]: cluster.toml: already exists; not overwriting it",
                     "  hint: edit it, or give another path: clustereval init other.toml"]
    assert (tmp_path / "cluster.toml").read_text() == "mine\n"


def test_run_with_a_reports_dir_that_cannot_be_created(tmp_path):
    lines = _bad(run_cli("run", "--reports-dir", "/proc/nope", cwd=tmp_path, timeout=60))
    assert lines == ["error[cannot-write]: /proc/nope (--reports-dir): cannot create the folder (No such file or "
                     "directory)", "  hint: pick a folder you can write, e.g. --reports-dir reports"]


def test_run_with_a_reports_dir_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x\n")
    lines = _bad(run_cli("run", "--reports-dir", "afile", cwd=tmp_path, timeout=60))
    assert lines == ["error[not-a-directory]: afile (--reports-dir): is a file, not a folder",
                     "  hint: give a folder, e.g. --reports-dir reports"]


def test_config_that_is_a_directory_or_missing(tmp_path):
    lines = _bad(run_cli("preflight", "--config", str(tmp_path), cwd=tmp_path, timeout=60))
    assert lines == [f"error[not-a-file]: {tmp_path}: is a directory, not a cluster.toml file",
                     f"  hint: give the file inside it, e.g. --config {tmp_path / 'cluster.toml'}"]
    lines = _bad(run_cli("preflight", "--config", "nope.toml", cwd=tmp_path, timeout=60))
    assert lines == ["error[file-not-found]: nope.toml: no such file",
                     "  hint: run `clustereval init` to write a commented template"]


def test_report_of_a_folder_that_is_not_a_run(tmp_path):
    lines = _bad(run_cli("report", str(tmp_path / "nope"), cwd=tmp_path, timeout=60))
    assert lines == [f"error[file-not-found]: {tmp_path / 'nope'}: no such folder",
                     "  hint: give the raw folder of a run: reports/raw-<name>-<YYYY-MM-DD-HHMMZ>"]


def test_click_parse_errors_have_the_same_form(tmp_path):
    lines = _bad(run_cli("run", "--profile", "bogus", cwd=tmp_path, timeout=60))
    assert lines == ["error[bad-argument]: Invalid value for '--profile': 'bogus' is not one of 'quick', "
                     "'standard', 'smoke'.", "  hint: `clustereval run --help` lists what it takes"]
    lines = _bad(run_cli("debug", "fs", "--nope", cwd=tmp_path, timeout=60))
    assert lines == ["error[unknown-option]: No such option '--nope'. Did you mean '--node'?",
                     "  hint: `clustereval debug fs --help` lists what it takes"]


# ---- cluster.toml and the hostfile ----------------------------------------------------------------


def _config(tmp_path: Path, toml: str, hostfile: bytes | None = None) -> str:
    (tmp_path / "cluster.toml").write_text(toml)
    if hostfile is not None:
        (tmp_path / "hostfile").write_bytes(hostfile)
    return str(tmp_path / "cluster.toml")


SSH_TWO = 'access = "ssh"\nnodes = ["a", "b"]\nhostfile = "hostfile"\n'
HOSTFILE_HINT = ("(hint: the hostfile is plain text, one peer address per line (10.0.0.1 or 10.0.0.1 slots=8); "
                 "was another file named by mistake?)")


@pytest.mark.parametrize(("data", "message"), [
    (b"10.0.0.1\n\x00\xff\xfe\n", "hostfile:2: not a text file: it holds binary data (a NUL byte)"),
    (b"10.0.0.1\n10.0.0.2\n\xff\xfe\n", "hostfile:3: not a text file: byte 0xff is not UTF-8"),
])
def test_hostfile_with_binary_bytes(tmp_path, data, message):
    lines = _bad(run_cli("preflight", "--config", _config(tmp_path, SSH_TWO, data), cwd=tmp_path, timeout=60))
    assert lines == ["error[bad-config]: 1 problem in the cluster config", f"  {message} {HOSTFILE_HINT}"]


def test_hostfile_with_an_invalid_ip_address(tmp_path):
    path = _config(tmp_path, SSH_TWO, b"10.0.0.1\n999.1.1.1 slots=8\n")
    lines = _bad(run_cli("preflight", "--config", path, cwd=tmp_path, timeout=60))
    assert lines == ["error[bad-config]: 1 problem in the cluster config",
                     "  hostfile:2: 999.1.1.1 is not a valid IPv4 address: 999 is more than 255 (hint: an IPv4 "
                     "address is four numbers from 0 to 255, e.g. 10.0.0.1)"]


def test_hostfile_that_is_a_directory(tmp_path):
    (tmp_path / "hostfile").mkdir()
    lines = _bad(run_cli("preflight", "--config", _config(tmp_path, SSH_TWO), cwd=tmp_path, timeout=60))
    assert lines[1] == (f"  {tmp_path / 'cluster.toml'}:3: the hostfile hostfile is a directory, not a file "
                        '(hint: point hostfile at the file of peer addresses inside it, e.g. hostfile = '
                        '"hostfile/hostfile")')


def test_cluster_toml_with_binary_bytes(tmp_path):
    (tmp_path / "cluster.toml").write_bytes(b'name = "x"\n\xff\xfe\n')
    lines = _bad(run_cli("preflight", "--config", "cluster.toml", cwd=tmp_path, timeout=60))
    assert lines == ["error[bad-config]: 1 problem in the cluster config",
                     "  cluster.toml:2: not a text file: byte 0xff is not UTF-8 (hint: cluster.toml is a text file; "
                     "`clustereval init` writes a commented one)"]


def test_local_access_with_a_node_that_is_not_this_host(tmp_path):
    here = socket.gethostname().split(".")[0]
    path = _config(tmp_path, 'access = "local"\nnodes = ["ghost-node-7"]\n')
    lines = _bad(run_cli("preflight", "--config", path, cwd=tmp_path, timeout=60))
    assert lines == ["error[bad-config]: 1 problem in the cluster config",
                     f'  {path}:2: access = "local" runs on this machine ({here}), but nodes names \'ghost-node-7\', '
                     f'which is not this host (hint: write nodes = ["{here}"] (or leave nodes out); to evaluate '
                     'ghost-node-7 from here, set access = "ssh" and list its address in a hostfile)']


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "THIS_HOST"])
def test_local_access_accepts_this_host_by_any_of_its_names(tmp_path, name):
    from clustereval.configload import load_config

    name = socket.gethostname().split(".")[0] if name == "THIS_HOST" else name
    cfg = load_config(_config(tmp_path, f'access = "local"\nnodes = ["{name}"]\n'))
    assert cfg.nodes == (name,)


def test_port_hints_give_a_real_port(tmp_path):
    path = _config(tmp_path, 'access = "ssh"\nnodes = ["a"]\nrdzv_port = 1.5\n[ssh]\nport = "7878"\n')
    lines = _bad(run_cli("preflight", "--config", path, cwd=tmp_path, timeout=60))
    assert lines == ["error[bad-config]: 2 problems in the cluster config",
                     f"  {path}:3: rdzv_port must be a TCP port number, not 1.5 (hint: for example: rdzv_port = 29500)",
                     f"  {path}:5: ssh.port must be a TCP port number, not the string '7878' (hint: write the number "
                     "without quotes: ssh.port = 7878)"]
    path = _config(tmp_path, 'access = "ssh"\nnodes = ["a"]\n[ssh]\nport = 78780\n')
    lines = _bad(run_cli("preflight", "--config", path, cwd=tmp_path, timeout=60))
    assert lines[1] == (f"  {path}:4: port = 78780 is not a TCP port (hint: ports run from 1 to 65535; the port sshd "
                        "listens on, e.g. 22, 2222 or 7878)")


def test_invalid_ip_in_nodes(tmp_path):
    path = _config(tmp_path, 'access = "ssh"\nnodes = ["10.0.0"]\n')
    lines = _bad(run_cli("preflight", "--config", path, cwd=tmp_path, timeout=60))
    assert lines[1] == (f"  {path}:2: node 10.0.0 is not a valid IPv4 address: it has 3 numbers, not 4 (hint: an "
                        "IPv4 address is four numbers from 0 to 255, e.g. 10.0.0.1)")


def test_ssh_key_that_is_a_directory(tmp_path):
    (tmp_path / "keys").mkdir()
    path = _config(tmp_path, 'access = "ssh"\nnodes = ["a"]\n[ssh]\nidentity_file = "keys"\n')
    lines = _bad(run_cli("preflight", "--config", path, cwd=tmp_path, timeout=60))
    assert lines[1] == (f"  {path}:4: ssh identity_file keys is a directory, not a file (hint: name the file itself, "
                        'e.g. identity_file = "~/.ssh/id_ed25519")')


def test_resume_and_cleanup_of_a_folder_that_is_not_a_run(tmp_path):
    lines = _bad(run_cli("run", "--resume", "nope", cwd=tmp_path, timeout=60))
    assert lines == ["error[file-not-found]: nope: no such folder",
                     "  hint: give the raw folder of a run: reports/raw-<name>-<YYYY-MM-DD-HHMMZ>"]
    (tmp_path / "raw-x").mkdir()
    lines = _bad(run_cli("cleanup", "raw-x", cwd=tmp_path, timeout=60))
    assert lines[0] == "error[bad-input]: raw-x: no state.json; this is not a clustereval run folder"


def test_an_unknown_phase_is_refused_before_reports_is_made(tmp_path):
    lines = _bad(run_cli("run", "--phases", "matmul,bogus", cwd=tmp_path, timeout=60))
    assert lines[0] == "error[bad-input]: unknown phase: bogus" and "choose from: preflight, packages" in lines[1]
    assert not (tmp_path / "reports").exists()

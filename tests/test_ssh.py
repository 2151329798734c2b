"""The SSH transport against real sshd servers in network namespaces."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from clustereval.config import SshConfig
from clustereval.errors import TransportError
from clustereval.transport.base import Node
from clustereval.transport.ssh import SshTransport, remote_command, ssh_options

# ---- argv building (no network) ------------------------------------------------------------


def test_options_carry_the_safety_settings_and_no_port_unless_given():
    opts = ssh_options(SshConfig())
    joined = " ".join(opts)
    for setting in ("BatchMode=yes", "ConnectTimeout=5", "StrictHostKeyChecking=accept-new"):
        assert setting in joined
    assert "-p" not in opts and "-l" not in opts and "-i" not in opts  # ~/.ssh/config decides


def test_options_port_user_identity_and_user_options_first():
    opts = ssh_options(SshConfig(port=7878, user="ubuntu", identity_file="/k/id", options=("ProxyJump=bastion",),
                                 connect_timeout_s=9, config_file="/c/ssh_config"))
    assert opts[opts.index("-p") + 1] == "7878"
    assert opts[opts.index("-l") + 1] == "ubuntu"
    assert opts[opts.index("-i") + 1] == "/k/id"
    assert opts[opts.index("-F") + 1] == "/c/ssh_config"
    assert "ConnectTimeout=9" in opts
    # ssh keeps the first value of a repeated option: the user's come before ours
    assert opts.index("ProxyJump=bastion") < opts.index("BatchMode=yes")


def test_remote_command_quotes_every_word():
    argv = ["echo", "a b", "$(id)", "`id`", "x;y", "it's", "new\nline"]
    cmd = remote_command(argv, env={"V": "$HOME;ls"}, cwd="/tmp/a dir", timeout_s=30)
    assert cmd.startswith("cd '/tmp/a dir' && timeout -k 5 30 env ")
    # what a POSIX shell splits the command part into is exactly our words, nothing expanded
    words = shlex.split(cmd.split(" && ", 1)[1])
    assert words == ["timeout", "-k", "5", "30", "env", "V=$HOME;ls", *argv]


# ---- against real sshd ---------------------------------------------------------------------


def test_run_on_every_node_in_parallel(cluster3):
    transport = cluster3.transport()
    nodes = cluster3.cluster_nodes()
    t0 = time.monotonic()
    results = transport.run_all(nodes, ["hostname"], timeout_s=20)
    assert [r.stdout.strip() for r in results] == [n.name for n in nodes]
    assert all(r.ok and r.node == n.name for r, n in zip(results, nodes, strict=True))
    assert time.monotonic() - t0 < 10


def test_run_env_cwd_stdin_and_exit_code(cluster3, tmp_path):
    transport = cluster3.transport()
    node = cluster3.cluster_nodes()[1]
    res = transport.run(node, ["sh", "-c", 'echo "$GREETING $(pwd)"; cat; exit 3'], env={"GREETING": "hi there"},
                        cwd=str(tmp_path), stdin="from stdin\n", timeout_s=20)
    assert res.rc == 3 and not res.ok and not res.timed_out
    assert res.stdout == f"hi there {tmp_path}\nfrom stdin\n"
    assert res.argv[0] == "sh"  # the argv as asked, not the ssh wrapping


def test_remote_255_is_the_command_not_ssh(cluster3):
    res = cluster3.transport().run(cluster3.cluster_nodes()[0], ["sh", "-c", "echo boom >&2; exit 255"])
    assert res.rc == 255 and "boom" in res.stderr


def test_shell_metacharacters_are_never_executed(cluster3, tmp_path):
    transport = cluster3.transport()
    node = cluster3.cluster_nodes()[2]
    marker = tmp_path / "pwned"
    hostile = [f"$(touch {marker}1)", f"`touch {marker}2`", f"; touch {marker}3", f"&& touch {marker}4",
               f"| touch {marker}5", f"'; touch {marker}6; '", f"\ntouch {marker}7", "*", "$HOME"]
    res = transport.run(node, ["printf", "%s\\n", *hostile], env={"X": f"$(touch {marker}8)"}, timeout_s=20)
    assert res.ok, res.stderr
    assert res.stdout.split("\n")[:-1] == [line for h in hostile for line in h.split("\n")]
    weird_dir = tmp_path / "a dir;$(touch x)"
    weird_dir.mkdir()
    res = transport.run(node, ["sh", "-c", 'pwd; echo "$X"'], env={"X": f"`touch {marker}9`"},
                        cwd=str(weird_dir), timeout_s=20)
    assert res.stdout == f"{weird_dir}\n`touch {marker}9`\n"
    transport.put(node, tmp_path / "a dir;$(touch x)", str(tmp_path / f"copy $(touch {marker}10)"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pwned")) == []


def test_timeout_kills_the_remote_command(cluster3, tmp_path):
    transport = cluster3.transport()
    flag = tmp_path / "still-running"
    t0 = time.monotonic()
    res = transport.run(cluster3.cluster_nodes()[0], ["sh", "-c", f"sleep 2; touch {flag}"], timeout_s=1)
    assert res.timed_out and res.rc == 124 and time.monotonic() - t0 < 5
    time.sleep(2)
    assert not flag.exists()


def test_killed_sshd_fails_fast_naming_node_and_port(cluster3):
    transport = cluster3.transport()
    node = cluster3.cluster_nodes()[1]
    cluster3.kill_sshd(1)
    t0 = time.monotonic()
    with pytest.raises(TransportError) as exc:
        transport.run(node, ["true"])
    assert time.monotonic() - t0 < 3
    err = exc.value
    assert err.error_id == "ssh-unreachable" and err.node == node.name and not err.transient
    assert err.lines()[0] == (f"error[ssh-unreachable]: {node.name} ({node.address}:{cluster3.ssh_port}): "
                              "refused the connection")
    assert f"port {cluster3.ssh_port}" in err.hint


def test_wrong_port_is_named(cluster3):
    wrong = cluster3.ssh_port + 1
    with pytest.raises(TransportError) as exc:
        cluster3.transport(port=wrong).run(cluster3.cluster_nodes()[0], ["true"])
    assert f":{wrong})" in exc.value.message and f"port {wrong}" in exc.value.hint


def test_port_from_ssh_config_is_reported(cluster3):
    # no port in SshConfig: the one ssh_config gives is what the error names
    cluster3.kill_sshd(0)
    transport = SshTransport(SshConfig(config_file=str(cluster3.ssh_config)))
    node = Node(name="first", address=cluster3.nodes[0].name)
    with pytest.raises(TransportError) as exc:
        transport.run(node, ["true"])
    assert exc.value.message.startswith(f"first ({cluster3.nodes[0].name}:{cluster3.ssh_port}): refused")


def test_rejected_key_is_an_auth_error(cluster3, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(TransportError) as exc:
        cluster3.transport(identity_file=str(other)).run(cluster3.cluster_nodes()[0], ["true"])
    assert exc.value.error_id == "ssh-auth" and "authorized_keys" in exc.value.hint


def test_changed_host_key_is_refused(cluster3, tmp_path):
    fake = tmp_path / "fake_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(fake)], check=True)
    node = cluster3.nodes[0]
    known = tmp_path / "known_hosts"
    known.write_text(f"[{node.address}]:{cluster3.ssh_port} {fake.with_suffix('.pub').read_text()}")
    with pytest.raises(TransportError) as exc:
        cluster3.transport(options=(f"UserKnownHostsFile={known}",)).run(cluster3.cluster_nodes()[0], ["true"])
    assert exc.value.error_id == "ssh-host-key" and "ssh-keygen -R" in exc.value.hint


def test_put_and_get_files_and_directories(cluster3, tmp_path):
    transport = cluster3.transport()
    node = cluster3.cluster_nodes()[1]
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "run.sh").write_text("#!/bin/sh\necho ok\n")
    (src / "sub" / "run.sh").chmod(0o755)
    blob = os.urandom(300_000)  # large enough that the stream arrives in many reads
    (src / "sub" / "blob.bin").write_bytes(blob)
    remote = tmp_path / "remote" / "deep"
    transport.put(node, src, str(remote))
    assert (remote / "a.txt").read_text() == "alpha\n"
    assert os.access(remote / "sub" / "run.sh", os.X_OK)
    # a file goes to exactly the path named, parents created, mode kept
    transport.put(node, src / "sub" / "run.sh", str(tmp_path / "r2" / "renamed.sh"))
    assert transport.run(node, [str(tmp_path / "r2" / "renamed.sh")]).stdout == "ok\n"
    back = tmp_path / "back"
    transport.get(node, str(remote), back)
    assert (back / "sub" / "run.sh").read_text() == "#!/bin/sh\necho ok\n"
    assert (back / "sub" / "blob.bin").read_bytes() == blob
    transport.get(node, str(remote / "a.txt"), tmp_path / "one.txt")
    assert (tmp_path / "one.txt").read_text() == "alpha\n"


def test_get_of_a_missing_path_names_it(cluster3, tmp_path):
    with pytest.raises(TransportError) as exc:
        cluster3.transport().get(cluster3.cluster_nodes()[0], str(tmp_path / "nope"), tmp_path / "x")
    assert exc.value.error_id == "copy-failed" and "nope" in exc.value.message


def test_popen_kill_stops_the_remote_process_tree(cluster3, tmp_path):
    transport = cluster3.transport()
    pidfile = tmp_path / "pid"
    proc = transport.popen(cluster3.cluster_nodes()[2],
                           ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo started; wait"])
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    child = int(pidfile.read_text())  # the namespaces share this machine's process table
    os.kill(child, 0)
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), "the remote child outlived the killed ssh"


def test_popen_runs_to_completion_with_its_exit_code(cluster3):
    proc = cluster3.transport().popen(cluster3.cluster_nodes()[0], ["sh", "-c", "echo out; exit 7"],
                                      env={"A": "1"})
    out, _ = proc.communicate(timeout=20)
    assert out == "out\n" and proc.returncode == 7


def test_nodes_reach_each_other_without_a_password(cluster3):
    # passwordless SSH between nodes, not only controller -> node (pdsh / DeepSpeed need it)
    res = cluster3.transport().run(cluster3.cluster_nodes()[0], ["ssh", cluster3.nodes[2].address, "hostname"],
                                   timeout_s=20)
    assert res.ok and res.stdout.strip() == cluster3.nodes[2].name


def test_testbed_knobs(cluster3):
    transport = cluster3.transport()
    node = cluster3.cluster_nodes()[1]
    cluster3.set_hostname_loopback(1)
    probe = ["python3", "-c", "import socket; print(socket.gethostbyname(socket.gethostname()))"]
    assert transport.run(node, probe).stdout.strip() == "127.0.1.1"
    # the other nodes still resolve it to its address
    other = ["python3", "-c", f"import socket; print(socket.gethostbyname({node.name!r}))"]
    assert transport.run(cluster3.cluster_nodes()[0], other).stdout.strip() == node.address
    cluster3.set_hostname_loopback(1, on=False)
    assert transport.run(node, probe).stdout.strip() == node.address
    cluster3.shape(1, rate_mbit=8)
    assert "tbf" in cluster3.exec(1, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
    cluster3.unshape(1)
    cluster3.kill_sshd(1)
    cluster3.start_sshd(1)
    assert transport.run(node, ["hostname"]).stdout.strip() == node.name


def test_a_node_is_reached_by_its_name_only_when_the_ssh_configuration_knows_it(tmp_path):
    # `ssh -G` only: no network. gpu-a has a Host block, gpu-b none, gpu-c only the catch-all
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-a\n  HostName 10.9.9.1\n  Port 2201\n  User alice\n"
                   "Host gpu-d\n  ProxyJump bastion\n"
                   "Host *\n  ServerAliveInterval 30\n")
    transport = SshTransport(SshConfig(config_file=str(cfg)))
    a, b = Node("gpu-a", "10.0.0.1", 0), Node("gpu-b", "10.0.0.2", 1)
    d, same = Node("gpu-d", "10.0.0.4", 3), Node("10.0.0.5", "10.0.0.5", 4)
    by_address = Node("first", "gpu-a", 5)  # the configuration knows the address, not the name
    assert transport.host_of(a) == "gpu-a" and transport.port_of(a) == "2201"
    assert transport.ssh_argv(a, "true")[-2:] == ["gpu-a", "true"]
    assert transport.host_of(b) == "10.0.0.2" and transport.port_of(b) == "22"
    assert transport.host_of(d) == "gpu-d"  # a ProxyJump alone is a setting for that name
    assert transport.host_of(same) == "10.0.0.5"
    assert transport.host_of(by_address) == "gpu-a" and transport.port_of(by_address) == "2201"
    assert transport.where(a) == "gpu-a (Host gpu-a of the ssh configuration, port 2201)"
    assert transport.where(b) == "gpu-b (10.0.0.2:22)"
    # the configured [ssh] port still wins over the Host block's
    assert SshTransport(SshConfig(config_file=str(cfg), port=7878)).port_of(a) == "7878"

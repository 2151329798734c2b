"""cluster.toml + hostfile loading: valid files load, every problem is listed with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from clustereval.config import Config, load_config
from clustereval.configload import parse_hostfile, template_text
from clustereval.errors import ConfigError
from tests.conftest import run_cli


def write(tmp_path: Path, toml: str, hostfile: str | None = None) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(textwrap.dedent(toml).lstrip("\n"))
    if hostfile is not None:
        (tmp_path / "hostfile").write_text(textwrap.dedent(hostfile).lstrip("\n"))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    return [str(p) for p in exc.value.problems]


def test_full_config_loads(tmp_path):
    key = tmp_path / "id_test"
    key.write_text("not really a key\n")
    path = write(tmp_path, f"""
        name = "h200-trial"
        access = "ssh"
        nodes = ["gpu-a", "gpu-b"]
        hostfile = "hostfile"
        local_scratch = "/mnt/nvme/"
        shared_paths = ["/data", "/checkpoint"]
        scratch_user = "alice"
        eval_python = "/opt/venv/bin/python"
        install_packages = false
        rdzv_port = 6002

        [ssh]
        port = 7878
        user = "ubuntu"
        identity_file = "{key.name}"
        options = ["ProxyJump=bastion"]

        [nccl_env]
        NCCL_IB_HCA = "mlx5"
        NCCL_DEBUG_SUBSYS = 1

        [targets]
        gpu_bf16_tflops = 989
        nvlink_uni_gb_s = 450.5

        [[targets.storage]]
        mount = "/data"
        source = "tier sheet"
        bw_mib_s = {{ "16KiB-read" = 200, "1GiB-write" = 800 }}
        """, hostfile="""
        # the peers
        10.0.0.1 slots=8

        10.0.0.2 slots=8   # second node
        """)
    cfg = load_config(path)
    assert cfg.name == "h200-trial" and cfg.access == "ssh" and cfg.nodes == ("gpu-a", "gpu-b")
    assert [(h.address, h.slots, h.line) for h in cfg.hosts] == [("10.0.0.1", 8, 2), ("10.0.0.2", 8, 4)]
    assert cfg.hostfile == str(tmp_path / "hostfile")
    assert cfg.gpus_per_node == 8  # from the hostfile's slots
    assert cfg.local_scratch == "/mnt/nvme" and cfg.shared_paths == ("/data", "/checkpoint")
    assert cfg.ssh.port == 7878 and cfg.ssh.user == "ubuntu" and cfg.ssh.identity_file == str(key)
    assert cfg.ssh.options == ("ProxyJump=bastion",)
    assert cfg.nccl_env == (("NCCL_IB_HCA", "mlx5"), ("NCCL_DEBUG_SUBSYS", "1"))
    assert cfg.targets.gpu_bf16_tflops == 989.0 and cfg.targets.nvlink_uni_gb_s == 450.5
    (st,) = cfg.targets.storage
    assert st.mount == "/data" and st.bw_mib_s == {"16KiB-read": 200.0, "1GiB-write": 800.0}
    assert cfg.install_packages is False and cfg.rdzv_port == 6002 and cfg.source == str(path)
    assert "ssh.port" in cfg.given and "shared_paths" in cfg.given and "gpus_per_node" not in cfg.given


def test_mpi_hostfile_and_one_node_without_hostfile(tmp_path):
    hosts, probs = parse_hostfile("10.0.0.1\nnode-b.cluster.local\n\n# end\n", "hostfile")
    assert [h.address for h in hosts] == ["10.0.0.1", "node-b.cluster.local"] and not probs
    cfg = load_config(write(tmp_path, 'access = "ssh"\nnodes = ["only-one"]\n'))
    assert cfg.nodes == ("only-one",) and cfg.hosts == () and cfg.gpus_per_node is None


def test_local_access_without_nodes_is_this_machine(tmp_path):
    cfg = load_config(write(tmp_path, 'name = "mine"\n'))
    assert cfg.access == "local" and len(cfg.nodes) == 1


def test_missing_nodes(tmp_path):
    path = write(tmp_path, '# comment\naccess = "ssh"\nhostfile = "hostfile"\n', hostfile="10.0.0.1\n10.0.0.2\n")
    (msg,) = problems(path)
    assert msg.startswith(f"{path}:2: nodes is missing")
    assert 'nodes = ["10.0.0.1", "10.0.0.2"]' in msg  # the hint offers the hostfile's addresses


def test_bad_port_unknown_access_and_more_at_once(tmp_path):
    path = write(tmp_path, """
        access = "pdsh"
        nodes = ["a"]
        rdzv_port = "29500"

        [ssh]
        port = 70000
        connect_timeout_s = 0
        colour = "blue"
        """)
    msgs = problems(path)
    assert msgs[0].startswith(f"{path}:1: unknown access method 'pdsh'") and "local, ssh, slurm" in msgs[0]
    assert msgs[1].startswith(f"{path}:3: rdzv_port must be a TCP port number, not the string '29500'")
    assert msgs[2].startswith(f"{path}:6: port = 70000 is not a TCP port")
    assert msgs[3].startswith(f"{path}:7: connect_timeout_s must be positive")
    assert msgs[4].startswith(f"{path}:8: unknown key 'ssh.colour'")
    assert len(msgs) == 5


def test_kubectl_without_its_table_says_what_to_write(tmp_path):
    # access = "kubectl" is built now: a node list is refused (the pods are the nodes) and the
    # missing [kubectl] table is named with an example
    path = write(tmp_path, 'access = "kubectl"\nnodes = ["a"]\n')
    msgs = problems(path)
    assert msgs[0].startswith(f"{path}:1: access = \"kubectl\" needs a [kubectl] table") and "selector" in msgs[0]
    assert msgs[1].startswith(f"{path}:2: with access = \"kubectl\" the nodes are the pods [kubectl] names")
    assert len(msgs) == 2


def test_hostfile_garbage_lines(tmp_path):
    path = write(tmp_path, 'access = "ssh"\nnodes = ["a", "b", "c"]\nhostfile = "hostfile"\n', hostfile="""
        10.0.0.1 slots=8
        this is not a host line
        10.0.0.3 slots=eight
        10.0.0.1
        ;rm -rf /
        """)
    msgs = problems(path)
    assert msgs[0].startswith("hostfile:2: cannot read 'this is not a host line': 'is' is not slots=N")
    assert msgs[1].startswith("hostfile:3: cannot read '10.0.0.3 slots=eight'")
    assert msgs[2].startswith("hostfile:4: 10.0.0.1 is listed twice (first at line 1)")
    assert msgs[3].startswith("hostfile:5: cannot read ';rm -rf /'") and "';'" in msgs[3]
    assert len(msgs) == 4  # no node-count complaint while the hostfile itself is unreadable


def test_two_nodes_without_hostfile(tmp_path):
    (msg,) = problems(write(tmp_path, 'access = "ssh"\n\nnodes = [\n  "a",\n  "b",\n]\n'))
    assert msg.startswith(f"{tmp_path / 'cluster.toml'}:3: 2 nodes but no hostfile")


def test_duplicate_nodes_point_at_the_element_line(tmp_path):
    path = write(tmp_path, 'access = "ssh"\nnodes = [\n  "a",\n  "b",\n  "a",\n]\n')
    msgs = problems(path)
    assert msgs[0].startswith(f"{path}:2: 2 nodes but no hostfile")
    assert msgs[1].startswith(f"{path}:5: node 'a' is listed twice (first at line 3)")


def test_node_count_differs_from_hostfile(tmp_path):
    path = write(tmp_path, 'access = "ssh"\nnodes = ["a", "b"]\nhostfile = "hostfile"\n',
                 hostfile="10.0.0.1\n10.0.0.2\n10.0.0.3\n")
    (msg,) = problems(path)
    assert msg.startswith(f"{path}:2: nodes lists 2 nodes but hostfile has 3 addresses")


def test_missing_hostfile_and_empty_hostfile(tmp_path):
    path = write(tmp_path, 'access = "ssh"\nnodes = ["a", "b"]\nhostfile = "nope"\n')
    (msg,) = problems(path)
    assert msg.startswith(f"{path}:3: cannot read the hostfile nope")
    path = write(tmp_path, 'access = "ssh"\nnodes = ["a", "b"]\nhostfile = "hostfile"\n', hostfile="# none\n\n")
    (msg,) = problems(path)
    assert msg.startswith("hostfile:1: the hostfile has no peer addresses")


def test_shell_metacharacters_are_rejected_with_the_character_named(tmp_path):
    path = write(tmp_path, """
        name = "ok"
        access = "ssh"
        nodes = ["gpu-a;reboot", "$(touch /tmp/x)", "`id`", "gpu b"]
        hostfile = "hostfile"
        local_scratch = "/tmp/my scratch"
        shared_paths = ["/data;rm -rf /", "/ok"]
        eval_python = "python3 -c 'import os'"
        scratch_user = "al$ce"

        [ssh]
        user = "root;id"
        """, hostfile="10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4\n")
    msgs = problems(path)
    joined = "\n".join(msgs)
    assert f"{path}:3: node 'gpu-a;reboot' contains ';'" in joined
    assert f"{path}:3: node '$(touch /tmp/x)' contains '$', '(', a space, ')'" in joined
    assert f"{path}:3: node '`id`' contains '`'" in joined
    assert f"{path}:3: node 'gpu b' contains a space" in joined
    assert f"{path}:5: local_scratch '/tmp/my scratch' contains a space" in joined
    assert f"{path}:6: shared_paths '/data;rm -rf /' contains ';', a space" in joined
    assert f"{path}:7: eval_python" in joined and f"{path}:8: scratch_user 'al$ce' contains '$'" in joined
    assert f"{path}:11: ssh user 'root;id' contains ';'" in joined
    assert not Path("/tmp/x").exists() or Path("/tmp/x").stat().st_mtime < path.stat().st_mtime


def test_relative_remote_paths_and_type_errors(tmp_path):
    path = write(tmp_path, """
        local_scratch = "scratch"
        shared_paths = "/data"
        gpus_per_node = -1
        install_packages = "yes"
        nodes = ["localhost"]

        [targets]
        gpu_bf16_tflops = -3

        [[targets.storage]]
        mount = "/data"
        bw_mib_s = { "16k-read" = 10 }
        """)
    msgs = problems(path)
    assert msgs[0].startswith(f"{path}:1: local_scratch 'scratch' must be an absolute path")
    assert msgs[1].startswith(f"{path}:2: shared_paths must be a list of strings, not the string '/data'")
    assert msgs[2].startswith(f"{path}:3: gpus_per_node must be 0 or more")
    assert msgs[3].startswith(f"{path}:4: install_packages must be true or false")
    assert msgs[4].startswith(f"{path}:8: gpu_bf16_tflops must be positive")
    assert msgs[5].startswith(f"{path}:12: unknown fio cell '16k-read'")


def test_toml_syntax_error_has_its_line(tmp_path):
    (msg,) = problems(write(tmp_path, 'name = "x"\nnodes = ["a"\naccess = \n'))
    assert msg.startswith(f"{tmp_path / 'cluster.toml'}:3: not valid TOML")


def test_unknown_top_key_suggests_the_close_one(tmp_path):
    (msg,) = problems(write(tmp_path, 'node = ["a"]\n'))
    assert "unknown key 'node'" in msg and "did you mean 'nodes'?" in msg


def test_cli_lists_every_problem_and_exits_2_without_traceback(tmp_path):
    path = write(tmp_path, 'access = "ssh"\nnodes = ["a", "a"]\n[ssh]\nport = 0\n')
    proc = run_cli("preflight", "--config", str(path), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "error[bad-config]: 2 problems in the cluster config"
    assert lines[1].startswith(f"  {path}:2: node 'a' is listed twice")
    assert lines[2].startswith(f"  {path}:4: port = 0 is not a TCP port")
    assert len(lines) == 3


def test_init_writes_a_template_that_loads_and_refuses_to_overwrite(tmp_path):
    proc = run_cli("init", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "cluster.toml"
    assert written.read_text() == template_text()
    cfg = load_config(written)
    assert isinstance(cfg, Config) and cfg.access == "local" and len(cfg.nodes) == 1
    again = run_cli("init", cwd=tmp_path, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr
    other = run_cli("init", str(tmp_path / "sub" / "c.toml"), cwd=tmp_path, timeout=60)
    assert other.returncode == 0 and load_config(tmp_path / "sub" / "c.toml").access == "local"


def test_template_examples_are_valid_when_uncommented(tmp_path):
    # every commented example line of the optional tables is real syntax
    lines = template_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# [nccl_env]"))
    body = [ln[2:] if ln.startswith("# ") and not ln.startswith("# One") and not ln.startswith("# O_DIRECT")
            and "=" in ln or ln.startswith("# [") else "" for ln in lines[start:]]
    path = tmp_path / "cluster.toml"
    path.write_text('nodes = ["localhost"]\n' + "\n".join(body) + "\n")
    cfg = load_config(path)
    assert cfg.nccl_env == (("NCCL_IB_HCA", "mlx5"),) and cfg.targets.gpu_bf16_tflops == 989.0
    assert len(cfg.targets.storage[0].bw_mib_s) == 6
    assert (cfg.verdicts.confidence_pct, cfg.verdicts.threshold_pct, cfg.verdicts.gpu_peers,
            cfg.verdicts.gpu_passes) == (99.0, 2.0, ("model", "driver"), 1)


def test_slurm_table_loads_and_needs_no_hostfile(tmp_path):
    from clustereval.configload import load_config

    path = write(tmp_path, 'access = "slurm"\n\n[slurm]\npartition = "gpu"\nnodes = 4\ngpus_per_node = 8\n'
                           'time_limit = "01:30:00"\naccount = "ml"\nsrun_args = ["--mpi=none"]\n')
    cfg = load_config(path)
    assert cfg.access == "slurm" and cfg.nodes == ()
    assert (cfg.slurm.partition, cfg.slurm.nodes, cfg.slurm.gpus_per_node, cfg.slurm.time_limit,
            cfg.slurm.account, cfg.slurm.srun_args) == ("gpu", 4, 8, "01:30:00", "ml", ("--mpi=none",))
    assert "slurm.partition" in cfg.given


def test_slurm_table_problems_have_lines(tmp_path):
    path = write(tmp_path, 'access = "slurm"\n[slurm]\nnodes = 0\ntime_limit = "soon"\npartion = "gpu"\n')
    msgs = problems(path)
    assert msgs[0].startswith(f"{path}:3: [slurm] nodes must be an integer >= 1, not 0")
    assert msgs[1].startswith(f"{path}:4: [slurm] time_limit 'soon' is not a Slurm time")
    assert msgs[2].startswith(f"{path}:5: unknown key `partion` in [slurm]")


def test_template_slurm_example_is_valid_when_uncommented(tmp_path):
    lines = template_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# [slurm]"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("# "))
    body = [ln[2:] for ln in lines[start:end]]
    path = tmp_path / "cluster.toml"
    path.write_text('access = "slurm"\n' + "\n".join(body) + "\n")
    cfg = load_config(path)
    assert (cfg.slurm.partition, cfg.slurm.nodes, cfg.slurm.job_id, cfg.slurm.salloc_args) == (
        "gpu", 2, "123456", ("--exclusive",))


def test_readme_sample_config_loads(tmp_path):
    import re

    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text()
    toml = re.search(r"```toml\n(.*?)```", readme, re.S).group(1)
    hostfile = re.search(r"```text\n(# the first line.*?)```", readme, re.S).group(1)
    key = tmp_path / "id_ed25519"
    key.write_text("key\n")
    path = write(tmp_path, toml.replace("~/.ssh/id_ed25519", str(key)), hostfile=hostfile)
    cfg = load_config(path)
    assert cfg.nodes == ("gpu-a", "gpu-b") and [h.address for h in cfg.hosts] == ["10.0.0.1", "10.0.0.2"]
    assert cfg.gpus_per_node == 8 and cfg.ssh.port == 7878 and cfg.targets.nvlink_uni_gb_s == 450


@pytest.mark.parametrize("doc", ["README.md", "docs/slurm.md"])
def test_slurm_sample_configs_in_the_docs_load(tmp_path, doc):
    import re

    from tests.conftest import REPO

    text = (REPO / doc).read_text()
    toml = next(block for block in re.findall(r"```toml\n(.*?)```", text, re.S) if 'access = "slurm"' in block)
    cfg = load_config(write(tmp_path, toml))
    assert cfg.access == "slurm" and cfg.nodes == () and cfg.hosts == ()
    assert (cfg.slurm.partition, cfg.slurm.nodes, cfg.slurm.gpus_per_node, cfg.slurm.time_limit) == (
        "gpu", 2, 8, "02:00:00")
    assert cfg.shared_paths == ("/lustre/project",) and cfg.slurm.salloc_args == ("--exclusive",)
    # every [slurm] key the sample shows is one the loader knows, and the doc names the salloc form
    assert "salloc --nodes" in text and "SLURM_JOB_ID" in text


def test_verdicts_table_loads_and_defaults(tmp_path):
    from clustereval.config import Verdicts

    assert load_config(write(tmp_path, 'nodes = ["localhost"]\n')).verdicts == Verdicts()
    path = write(tmp_path, 'nodes = ["localhost"]\n[verdicts]\nconfidence_pct = 99.9\nthreshold_pct = 3\n'
                           'gpu_peers = ["model", "node"]\n')
    cfg = load_config(path)
    assert cfg.verdicts == Verdicts(confidence_pct=99.9, threshold_pct=3.0, gpu_peers=("model", "node"))
    assert "verdicts.confidence_pct" in cfg.given


def test_verdicts_problems_have_lines(tmp_path):
    path = write(tmp_path, 'nodes = ["localhost"]\n[verdicts]\nconfidence_pct = 0.99\nthreshold_pct = -1\n'
                           'gpu_peers = [\n  "model",\n  "rack",\n  "model",\n]\nconfidance = 3\n')
    msgs = problems(path)
    assert msgs[0].startswith(f"{path}:3: verdicts.confidence_pct must be above 50 and below 100, not 0.99")
    assert "a percentage, not a fraction" in msgs[0]
    assert msgs[1].startswith(f"{path}:4: verdicts.threshold_pct must be above 0 and at most 50, not -1")
    assert msgs[2].startswith(f"{path}:7: unknown GPU peer key 'rack' in verdicts.gpu_peers")
    assert msgs[3].startswith(f"{path}:8: 'model' is listed twice in verdicts.gpu_peers")
    assert msgs[4].startswith(f"{path}:10: unknown key 'verdicts.confidance'") and "confidence_pct" in msgs[4]
    assert len(msgs) == 5


def test_gpu_passes_loads_and_defaults_to_the_runbooks_one(tmp_path):
    from clustereval.config import Verdicts

    assert Verdicts().gpu_passes == 1
    assert load_config(write(tmp_path, 'nodes = ["localhost"]\n[verdicts]\nthreshold_pct = 3\n')).verdicts.gpu_passes == 1
    for n in (1, 7, 20):
        cfg = load_config(write(tmp_path, f'nodes = ["localhost"]\n[verdicts]\ngpu_passes = {n}\n'))
        assert cfg.verdicts.gpu_passes == n and "verdicts.gpu_passes" in cfg.given


@pytest.mark.parametrize(("value", "says"), [
    ("0", "verdicts.gpu_passes must be from 1 to 20, not 0"),
    ("21", "verdicts.gpu_passes must be from 1 to 20, not 21"),
    ("-3", "verdicts.gpu_passes must be from 1 to 20, not -3"),
    ("2.5", "verdicts.gpu_passes must be a whole number of passes, not 2.5"),
    ('"7"', "verdicts.gpu_passes must be a whole number of passes, not the string '7' (hint: write the number without quotes"),
    ("true", "verdicts.gpu_passes must be a whole number of passes, not true"),
])
def test_bad_gpu_passes_names_the_line(tmp_path, value, says):
    path = write(tmp_path, f'nodes = ["localhost"]\n[verdicts]\nconfidence_pct = 99\ngpu_passes = {value}\n')
    (msg,) = problems(path)
    assert msg.startswith(f"{path}:4: {says}"), msg


def test_cli_refuses_a_bad_gpu_passes_with_exit_2_before_anything_runs(tmp_path):
    path = write(tmp_path, 'nodes = ["localhost"]\n[verdicts]\ngpu_passes = 0\n')
    proc = run_cli("run", "--config", str(path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "error[bad-config]: 1 problem in the cluster config"
    assert lines[1].startswith(f"  {path}:3: verdicts.gpu_passes must be from 1 to 20, not 0")
    assert not (tmp_path / "reports").exists()  # nothing slow started, no run folder

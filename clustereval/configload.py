"""Reading cluster.toml and the hostfile into a ``Config``, listing every problem at once.

Each problem names ``file:line``, says what is wrong and how to fix it. Anything that will reach
a shell on a node (node names, hostfile addresses, remote paths, user names) must be plain:
shell metacharacters are rejected here, before anything runs.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from clustereval.config import (
    GPU_PEER_KEYS,
    IMPLEMENTED_ACCESS,
    MAX_GPU_PASSES,
    SKIPPABLE,
    Config,
    HostEntry,
    KubectlConfig,
    SlurmConfig,
    SshConfig,
    StorageTarget,
    Targets,
    Verdicts,
    _user,
    kubectl_access_problems,
    kubectl_config_from_table,
    slurm_config_from_table,
)
from clustereval.errors import ConfigError, Problem
from clustereval.hostfile import (
    _IP_HINT,
    _NODE_RE,
    _bad_chars,
    address_problem,
    is_this_host,
    parse_hostfile,
    this_host,
)
from clustereval.inputs import decode_text
from clustereval.tomllines import TomlLines

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

STORAGE_CELLS = ("16KiB-read", "16KiB-write", "1MiB-read", "1MiB-write", "1GiB-read", "1GiB-write")

TOP_KEYS = ("name", "access", "nodes", "hostfile", "gpus_per_node", "local_scratch", "shared_paths",
            "scratch_user", "scratch_root", "eval_python", "fallback_python", "torch_index", "install_packages", "skip",
            "rdzv_port", "cpu_ranks_per_node", "reports_dir", "ssh", "slurm", "kubectl", "nccl_env", "targets",
            "verdicts")
SSH_KEYS = ("port", "user", "identity_file", "options", "connect_timeout_s", "config_file")
TARGET_KEYS = ("gpu_bf16_tflops", "nvlink_uni_gb_s", "internode_busbw_gb_s", "hbm_copy_gb_s", "pcie_gb_s", "storage")
STORAGE_KEYS = ("mount", "bw_mib_s", "iops", "source")
VERDICT_KEYS = ("confidence_pct", "threshold_pct", "gpu_peers", "gpu_passes")

# What may reach a remote shell. Quoting would make anything safe, but a node name or path with
# these characters is almost always a paste error, and the report and shell commands the user
# copies from it stay readable.
_REMOTE_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@%=,:~-]*$")
_COMMAND_RE = re.compile(r"^[A-Za-z0-9._/+@%=,:~-]+$")
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SSH_OPTION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(=|\s+)\S.*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Loader:
    """One pass over the parsed TOML, collecting problems instead of stopping at the first."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.display = str(path)
        self.lines = TomlLines(text)
        self.problems: list[Problem] = []
        self.given: list[str] = []

    # -- reporting ------------------------------------------------------------------------------
    def at(self, *key) -> str:
        return f"{self.display}:{self.lines.line(*key)}"

    def problem(self, key: tuple, message: str, hint: str = "", line: int | None = None) -> None:
        where = f"{self.display}:{line}" if line is not None else self.at(*key)
        self.problems.append(Problem(where, message, hint))

    def unknown(self, table: dict, allowed: tuple[str, ...], prefix: tuple = ()) -> None:
        for key in table:
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys here: {', '.join(allowed)}"
            label = ".".join((*[str(p) for p in prefix if not isinstance(p, int)], key))
            self.problem((*prefix, key), f"unknown key {label!r}", hint)

    # -- typed getters (None when absent or wrong; wrong types are reported) ---------------------
    def get(self, table: dict, key: str, kind: type | tuple, prefix: tuple = (), what: str = "",
            example: str = "") -> Any:
        if key not in table:
            return None
        value = table[key]
        label = ".".join((*[str(p) for p in prefix if not isinstance(p, int)], key))
        self.given.append(label)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            self.problem((*prefix, key), f"{label} must be {what or _kind_name(kinds)}, not {_show(value)}",
                         f"write the number without quotes: {label} = {value.strip()}"
                         if kinds == (int,) and isinstance(value, str) and value.strip().isdigit()
                         else f"for example: {label} = {example or _example(kinds)}")
            return None
        return value

    def positive(self, table: dict, key: str, prefix: tuple = (), *, integer: bool = True) -> Any:
        value = self.get(table, key, int if integer else (int, float), prefix,
                         "a positive whole number" if integer else "a positive number")
        if value is not None and value <= 0:
            self.problem((*prefix, key), f"{key} must be positive, not {value}")
            return None
        return value

    def port(self, table: dict, key: str, prefix: tuple = (), hint: str = "", example: int = 29500) -> int | None:
        value = self.get(table, key, int, prefix, "a TCP port number", str(example))
        if value is not None and not 1 <= value <= 65535:
            self.problem((*prefix, key), f"{key} = {value} is not a TCP port",
                         f"ports run from 1 to 65535; {hint}" if hint else f"ports run from 1 to 65535, e.g. {example}")
            return None
        return value

    def remote_path(self, table: dict, key: str, prefix: tuple = (), value: Any = None, line: int | None = None,
                    ) -> str | None:
        if value is None:
            value = self.get(table, key, str, prefix, "a path")
        if value is None:
            return None
        if not _REMOTE_PATH_RE.match(value):
            if not value.startswith("/"):
                self.problem((*prefix, key), f"{key} {value!r} must be an absolute path on the nodes",
                             "start it with /, e.g. /tmp or /data", line=line)
            else:
                self.problem((*prefix, key), f"{key} {value!r} contains {_bad_chars(value)}, which a shell "
                             "would interpret", "use a path of letters, digits and . _ - / (a symlink without "
                             "spaces works)", line=line)
            return None
        return value.rstrip("/") or "/"

    def string_list(self, table: dict, key: str, prefix: tuple = ()) -> list[tuple[int, str]] | None:
        """(line, item) per element of an array of strings."""
        value = self.get(table, key, list, prefix, "a list of strings")
        if value is None:
            return None
        out = []
        for i, item in enumerate(value):
            line = self.lines.element_line((*prefix, key), i)
            if not isinstance(item, str):
                self.problem((*prefix, key), f"{key}[{i}] must be a string, not {_show(item)}", line=line)
                continue
            out.append((line, item))
        return out

    # -- the file -------------------------------------------------------------------------------
    def load(self, data: dict) -> Config | None:
        self.unknown(data, TOP_KEYS)
        base_dir = self.path.parent
        kw: dict[str, Any] = {}

        name = self.get(data, "name", str)
        if name is not None:
            if _NAME_RE.match(name):
                kw["name"] = name
            else:
                self.problem(("name",), f"name {name!r} contains {_bad_chars(name)}",
                             "the name starts the report's file name: letters, digits, '.', '_', '-'")

        access = self.get(data, "access", str)
        if access is None and "access" not in data:
            access = "local"
        if access is not None:
            if access in IMPLEMENTED_ACCESS:
                kw["access"] = access
            else:
                self.problem(("access",), f"unknown access method {access!r}",
                             f"choose one of: {', '.join(IMPLEMENTED_ACCESS)}")
                access = None

        hosts = self._hostfile(data, base_dir)
        nodes = self._nodes(data, hosts[1] if hosts else None)
        if nodes is not None:
            kw["nodes"] = tuple(nodes)
            if access == "local" and len(nodes) > 1:
                self.problem(("nodes",), f"access = \"local\" runs on this machine only, but nodes lists {len(nodes)}",
                             "set access = \"ssh\" (with a hostfile) to evaluate several nodes")
            elif access == "local" and len(nodes) == 1 and not is_this_host(nodes[0]):
                here = this_host()
                self.problem(("nodes",), f"access = \"local\" runs on this machine ({here}), but nodes names "
                             f"{nodes[0]!r}, which is not this host",
                             f'write nodes = ["{here}"] (or leave nodes out); to evaluate {nodes[0]} from here, '
                             'set access = "ssh" and list its address in a hostfile')
            if len(nodes) >= 2 and "hostfile" not in data and access not in ("slurm", "kubectl"):
                self.problem(("nodes",), f"{len(nodes)} nodes but no hostfile",
                             "write the peer IPs one per line (10.0.0.1 or 10.0.0.1 slots=8) and set "
                             "hostfile = \"hostfile\"; rendezvous and inter-node SSH need them")
            if hosts is not None and hosts[2] and len(hosts[1]) != len(nodes):
                self.problem(("nodes",), f"nodes lists {len(nodes)} node{'s' if len(nodes) != 1 else ''} but "
                             f"{hosts[3]} has {len(hosts[1])} address{'es' if len(hosts[1]) != 1 else ''}",
                             "one hostfile line per node, in the same order (line N is node N-1)")
        if hosts is not None:
            kw["hostfile"], kw["hosts"] = str(hosts[0]), tuple(hosts[1])

        gpus = self.get(data, "gpus_per_node", int, what="a whole number of GPUs")
        if gpus is not None:
            if gpus < 0:
                self.problem(("gpus_per_node",), f"gpus_per_node must be 0 or more, not {gpus}")
            else:
                kw["gpus_per_node"] = gpus
        if hosts is not None:
            slots = {h.slots for h in hosts[1]}
            if len(slots) == 1 and None not in slots:
                (only,) = slots
                if gpus is not None and gpus != only:
                    self.problem(("gpus_per_node",), f"gpus_per_node = {gpus} but the hostfile says slots={only}",
                                 "make them agree, or drop gpus_per_node and let the hostfile say it")
                elif gpus is None:
                    kw["gpus_per_node"] = only

        local = self.remote_path(data, "local_scratch")
        if local:
            kw["local_scratch"] = local
        shared = self.string_list(data, "shared_paths")
        if shared is not None:
            paths: list[str] = []
            for line, item in shared:
                path = self.remote_path({}, "shared_paths", value=item, line=line)
                if path and path in paths:
                    self.problem(("shared_paths",), f"shared path {path} is listed twice", line=line)
                elif path:
                    paths.append(path)
            kw["shared_paths"] = tuple(paths)
        user = self.get(data, "scratch_user", str)
        if user is not None:
            if _USER_RE.match(user):
                kw["scratch_user"] = user
            else:
                self.problem(("scratch_user",), f"scratch_user {user!r} contains {_bad_chars(user)}",
                             "a user name: letters, digits, '.', '_', '-'")
        root = self.remote_path(data, "scratch_root")
        if root:
            kw["scratch_root"] = root
        python = self.get(data, "eval_python", str)
        if python is not None:
            if _COMMAND_RE.match(python):
                kw["eval_python"] = python
            else:
                self.problem(("eval_python",), f"eval_python {python!r} contains {_bad_chars(python)}, which a "
                             "shell would interpret", "an interpreter path such as /opt/venv/bin/python")
        fallback = self.get(data, "fallback_python", str)
        if fallback is not None:
            if _COMMAND_RE.match(fallback):
                kw["fallback_python"] = fallback
            else:
                self.problem(("fallback_python",), f"fallback_python {fallback!r} contains {_bad_chars(fallback)}, "
                             "which a shell would interpret", "an interpreter path such as /opt/torch/bin/python")
        index = self.get(data, "torch_index", str)
        if index is not None:
            if re.match(r"^https?://[^\s'\"`$;|&<>()]+$", index):
                kw["torch_index"] = index.rstrip("/")
            else:
                self.problem(("torch_index",), f"torch_index {index!r} is not an http(s) URL",
                             "e.g. https://download.pytorch.org/whl (clustereval appends /cu130 etc.)")
        install = self.get(data, "install_packages", bool, what="true or false")
        if install is not None:
            kw["install_packages"] = install
        skip = self.string_list(data, "skip")
        if skip is not None:
            unknown = [(line, name) for line, name in skip if name not in SKIPPABLE]
            for line, name in unknown:
                self.problem(("skip",), f"skip names {name!r}, which is not a pass of the run",
                             f"choose from: {', '.join(SKIPPABLE)} (preflight always runs)", line=line)
            if not unknown:
                kw["skip"] = tuple(dict.fromkeys(name for _, name in skip))
        rdzv = self.port(data, "rdzv_port", hint="the rendezvous port on the first hostfile node, e.g. 29500")
        if rdzv is not None:
            kw["rdzv_port"] = rdzv
        cpu_ranks = self.positive(data, "cpu_ranks_per_node")
        if cpu_ranks is not None:
            kw["cpu_ranks_per_node"] = int(cpu_ranks)
        reports = self.get(data, "reports_dir", str)
        if reports is not None:
            if reports.strip() and "\n" not in reports:
                kw["reports_dir"] = reports
            else:
                self.problem(("reports_dir",), "reports_dir must be a directory path")

        slurm = self._slurm(data)
        if slurm is not None:
            kw["slurm"] = slurm
        kubectl = self._kubectl(data, access, base_dir)
        if kubectl is not None:
            kw["kubectl"] = kubectl
        ssh = self._ssh(data, base_dir)
        if ssh is not None:
            kw["ssh"] = ssh
            if ssh.port is not None and rdzv is not None and ssh.port == rdzv:
                self.problem(("rdzv_port",), f"rdzv_port {rdzv} is also the SSH port",
                             "the rendezvous needs a free port on the first node, e.g. 29500")
        nccl = self._nccl(data)
        if nccl is not None:
            kw["nccl_env"] = nccl
        targets = self._targets(data)
        if targets is not None:
            kw["targets"] = targets
        verdicts = self._verdicts(data)
        if verdicts is not None:
            kw["verdicts"] = verdicts

        if self.problems:
            return None
        if "nodes" not in kw and access not in ("slurm", "kubectl"):  # access = "local", no node list: this machine
            import socket

            kw["nodes"] = (socket.gethostname().split(".")[0] or "localhost",)
        kw.setdefault("scratch_user", _user())
        return Config(source=str(self.path), given=tuple(self.given), **kw)

    def _nodes(self, data: dict, hosts: list[HostEntry] | None) -> list[str] | None:
        items = self.string_list(data, "nodes")
        if items is None:
            # with Slurm the allocation names the nodes (scontrol show hostnames)
            if "nodes" not in data and data.get("access", "local") not in ("local", "slurm", "kubectl"):
                example = ", ".join(f'"{h.address}"' for h in hosts[:4]) if hosts else '"gpu-a", "gpu-b"'
                self.problem(("access",), "nodes is missing: every node identity is needed",
                             f"list them in hostfile order: nodes = [{example}] (host names, pod names or IPs)")
            return None
        if not items:
            self.problem(("nodes",), "nodes is empty", 'list every node: nodes = ["gpu-a", "gpu-b"]')
            return None
        names: list[str] = []
        first: dict[str, int] = {}
        for line, node in items:
            why = address_problem(node)
            if why is not None and "contains" not in why:
                self.problem(("nodes",), f"node {why}", _IP_HINT, line=line)
            elif why is not None:
                self.problem(("nodes",), f"node {node!r} contains {_bad_chars(node)}, which a shell would interpret",
                             "node identities are host names, pod names or IP addresses: letters, digits, '.', "
                             "'-', '_'", line=line)
            elif node in first:
                self.problem(("nodes",), f"node {node!r} is listed twice (first at line {first[node]})",
                             "list each node once", line=line)
            else:
                first[node] = line
                names.append(node)
        return names

    def _hostfile(self, data: dict, base_dir: Path) -> tuple[Path, list[HostEntry], bool, str] | None:
        """(path, entries, parsed cleanly, the name problems use)."""
        value = self.get(data, "hostfile", str, what="a path")
        if value is None:
            return None
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        display = value if not Path(value).is_absolute() else str(path)
        if not value.strip():
            self.problem(("hostfile",), "hostfile is an empty path", 'name the file, e.g. hostfile = "hostfile"')
            return None
        if path.is_dir():
            self.problem(("hostfile",), f"the hostfile {value} is a directory, not a file",
                         "point hostfile at the file of peer addresses inside it, e.g. "
                         f'hostfile = "{value.rstrip("/")}/hostfile"')
            return None
        try:
            raw = path.read_bytes()
        except OSError as exc:
            self.problem(("hostfile",), f"cannot read the hostfile {value}: {exc.strerror or exc}",
                         "paths are relative to cluster.toml; one peer address per line")
            return None
        text, bad_line, why = decode_text(raw)
        if text is None:
            self.problems.append(Problem(f"{display}:{bad_line}", why,
                                         "the hostfile is plain text, one peer address per line (10.0.0.1 or "
                                         "10.0.0.1 slots=8); was another file named by mistake?"))
            return None
        hosts, problems = parse_hostfile(text, display)
        self.problems.extend(problems)
        return path, hosts, not problems, display

    def _slurm(self, data: dict) -> SlurmConfig | None:
        """``[slurm]`` (the checks live beside the schema in ``config.slurm_config_from_table``)."""
        table = self.get(data, "slurm", dict, what="a table ([slurm])")
        if table is None:
            return None
        self.given.extend(f"slurm.{key}" for key in table)
        cfg, problems = slurm_config_from_table(table)
        for key, message, hint in problems:
            self.problem(("slurm", key), message, hint)
        return None if problems else cfg

    def _kubectl(self, data: dict, access: str | None, base_dir: Path) -> KubectlConfig | None:
        """``[kubectl]`` and what access = "kubectl" rules out (checks in ``config.kubectl_config_from_table``)."""
        table = self.get(data, "kubectl", dict, what="a table ([kubectl])")
        if access == "kubectl":
            for key, message, hint in kubectl_access_problems(data):
                self.problem((key,), message, hint)
        if table is None:
            return None
        self.given.extend(f"kubectl.{key}" for key in table)
        cfg, problems = kubectl_config_from_table(table, base_dir)
        for key, message, hint in problems:
            self.problem(("kubectl", key) if key else ("kubectl",), message, hint)
        return None if problems else cfg

    def _ssh(self, data: dict, base_dir: Path) -> SshConfig | None:
        table = self.get(data, "ssh", dict, what="a table ([ssh])")
        if table is None:
            return None
        prefix = ("ssh",)
        self.unknown(table, SSH_KEYS, prefix)
        kw: dict[str, Any] = {}
        port = self.port(table, "port", prefix, "the port sshd listens on, e.g. 22, 2222 or 7878", example=7878)
        if port is not None:
            kw["port"] = port
        user = self.get(table, "user", str, prefix)
        if user is not None:
            if _USER_RE.match(user):
                kw["user"] = user
            else:
                self.problem((*prefix, "user"), f"ssh user {user!r} contains {_bad_chars(user)}",
                             "a login name: letters, digits, '.', '_', '-'")
        for key in ("identity_file", "config_file"):
            value = self.get(table, key, str, prefix, "a path")
            if value is None:
                continue
            path = Path(value).expanduser()
            path = path if path.is_absolute() else base_dir / path
            if path.is_dir():
                self.problem((*prefix, key), f"ssh {key} {value} is a directory, not a file",
                             "name the file itself, e.g. identity_file = \"~/.ssh/id_ed25519\""
                             if key == "identity_file" else "name the file itself, e.g. config_file = \"ssh_config\"")
            elif not path.is_file():
                self.problem((*prefix, key), f"ssh {key} {value} does not exist",
                             "paths are relative to cluster.toml; ~ is your home directory")
            else:
                kw[key] = str(path)
        options = self.string_list(table, "options", prefix)
        if options is not None:
            good = []
            for line, opt in options:
                if _SSH_OPTION_RE.match(opt) and "\n" not in opt:
                    good.append(opt)
                else:
                    self.problem((*prefix, "options"), f"ssh option {opt!r} is not Key=Value",
                                 'e.g. options = ["ProxyJump=bastion", "ServerAliveInterval=30"]', line=line)
            kw["options"] = tuple(good)
        timeout = self.positive(table, "connect_timeout_s", prefix)
        if timeout is not None:
            kw["connect_timeout_s"] = timeout
        return SshConfig(**kw)

    def _nccl(self, data: dict) -> tuple[tuple[str, str], ...] | None:
        table = self.get(data, "nccl_env", dict, what="a table ([nccl_env])")
        if table is None:
            return None
        out = []
        for key, value in table.items():
            if not _ENV_RE.match(key):
                self.problem(("nccl_env", key), f"{key!r} is not an environment variable name",
                             "e.g. NCCL_IB_HCA = \"mlx5\"")
                continue
            if isinstance(value, bool):
                value = int(value)
            if not isinstance(value, (str, int, float)):
                self.problem(("nccl_env", key), f"nccl_env.{key} must be a string or a number, not {_show(value)}")
                continue
            out.append((key, str(value)))
        return tuple(out)

    def _targets(self, data: dict) -> Targets | None:
        table = self.get(data, "targets", dict, what="a table ([targets])")
        if table is None:
            return None
        prefix = ("targets",)
        self.unknown(table, TARGET_KEYS, prefix)
        kw: dict[str, Any] = {}
        for key in ("gpu_bf16_tflops", "nvlink_uni_gb_s", "internode_busbw_gb_s", "hbm_copy_gb_s", "pcie_gb_s"):
            value = self.positive(table, key, prefix, integer=False)
            if value is not None:
                kw[key] = float(value)
        storage = self.get(table, "storage", list, prefix, "a list of [[targets.storage]] tables")
        if storage is not None:
            entries = []
            for i, entry in enumerate(storage):
                sp = (*prefix, "storage", i)
                if not isinstance(entry, dict):
                    self.problem(sp, "each [[targets.storage]] entry must be a table")
                    continue
                self.unknown(entry, STORAGE_KEYS, sp)
                mount = self.remote_path(entry, "mount", sp)
                if mount is None:
                    if "mount" not in entry:
                        self.problem(sp, "a [[targets.storage]] entry needs mount = \"/path\"")
                    continue
                cells: dict[str, dict[str, float]] = {}
                for unit in ("bw_mib_s", "iops"):
                    values = self.get(entry, unit, dict, sp, "a table of cell = number") or {}
                    cells[unit] = {}
                    for cell, v in values.items():
                        if cell not in STORAGE_CELLS:
                            self.problem((*sp, unit), f"unknown fio cell {cell!r} in {unit}",
                                         f"cells are {', '.join(STORAGE_CELLS)}")
                        elif isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                            self.problem((*sp, unit), f"{unit}.{cell} must be a positive number, not {_show(v)}")
                        else:
                            cells[unit][cell] = float(v)
                source = self.get(entry, "source", str, sp) or ""
                entries.append(StorageTarget(mount=mount, bw_mib_s=cells["bw_mib_s"], iops=cells["iops"],
                                             source=source))
            kw["storage"] = tuple(entries)
        return Targets(**kw)


    def _verdicts(self, data: dict) -> Verdicts | None:
        table = self.get(data, "verdicts", dict, what="a table ([verdicts])")
        if table is None:
            return None
        prefix = ("verdicts",)
        self.unknown(table, VERDICT_KEYS, prefix)
        kw: dict[str, Any] = {}
        confidence = self.get(table, "confidence_pct", (int, float), prefix, "a percentage", "99")
        if confidence is not None:
            if 50 < confidence < 100:
                kw["confidence_pct"] = float(confidence)
            else:
                self.problem((*prefix, "confidence_pct"), f"verdicts.confidence_pct must be above 50 and below 100, "
                             f"not {_show(confidence)}", "e.g. confidence_pct = 99 (a percentage, not a fraction)")
        threshold = self.get(table, "threshold_pct", (int, float), prefix, "a percentage", "2")
        if threshold is not None:
            if 0 < threshold <= 50:
                kw["threshold_pct"] = float(threshold)
            else:
                self.problem((*prefix, "threshold_pct"), f"verdicts.threshold_pct must be above 0 and at most 50, "
                             f"not {_show(threshold)}", "e.g. threshold_pct = 2 (the runbook's 2% rule)")
        peers = self.string_list(table, "gpu_peers", prefix)
        if peers is not None:
            keys: list[str] = []
            for line, item in peers:
                if item not in GPU_PEER_KEYS:
                    self.problem((*prefix, "gpu_peers"), f"unknown GPU peer key {item!r} in verdicts.gpu_peers",
                                 f"choose from {', '.join(GPU_PEER_KEYS)}, e.g. gpu_peers = [\"model\", \"driver\"]",
                                 line=line)
                elif item in keys:
                    self.problem((*prefix, "gpu_peers"), f"{item!r} is listed twice in verdicts.gpu_peers", line=line)
                else:
                    keys.append(item)
            kw["gpu_peers"] = tuple(keys)
        passes = self.get(table, "gpu_passes", int, prefix, "a whole number of passes", "7")
        if passes is not None:
            if 1 <= passes <= MAX_GPU_PASSES:
                kw["gpu_passes"] = passes
            else:
                self.problem((*prefix, "gpu_passes"), f"verdicts.gpu_passes must be from 1 to {MAX_GPU_PASSES}, "
                             f"not {_show(passes)}", "e.g. gpu_passes = 7 (every GPU measured in 7 passes), or 1 for "
                             "the runbook's one pass, three when a GPU is more than 2% below its node median")
        return Verdicts(**kw)


def _kind_name(kinds: tuple) -> str:
    names = {str: "a string", int: "a whole number", float: "a number", bool: "true or false", list: "a list",
             dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _example(kinds: tuple) -> str:
    return {str: '"..."', int: "8", float: "1.5", bool: "true", list: '["..."]', dict: "{ ... }"}.get(kinds[0], "...")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def load_config(path: Path | str) -> Config:
    """Read and validate ``path`` (and the hostfile it names). Raises ``ConfigError`` listing
    every problem, each as ``file:line: message (hint: ...)``."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError([Problem(str(path), "is a directory, not a cluster.toml file",
                                   f"give the file inside it, e.g. --config {path / 'cluster.toml'}")])
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot read: {exc.strerror or exc}",
                                   "run `clustereval init` to write a commented template")]) from None
    text, bad_line, why = decode_text(raw)
    if text is None:
        raise ConfigError([Problem(f"{path}:{bad_line}", why,
                                   "cluster.toml is a text file; `clustereval init` writes a commented one")])
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        line = m.group(1) if m else "1"
        raise ConfigError([Problem(f"{path}:{line}", f"not valid TOML: {re.sub(r' ?[(]at line.*', '', msg)}",
                                   'check quotes and brackets; strings need "quotes", lists [brackets]')]) from None
    loader = _Loader(path, text)
    config = loader.load(data)
    if config is None:
        raise ConfigError(_in_file_order(loader.problems))
    return config


def _in_file_order(problems: list[Problem]) -> list[Problem]:
    """Grouped by file (cluster.toml first, as met), by line within a file."""
    files: list[str] = []

    def key(problem: Problem) -> tuple:
        file, _, line = problem.where.rpartition(":")
        if file not in files:
            files.append(file)
        return (files.index(file), int(line) if line.isdigit() else 0)

    keys = [key(p) for p in problems]
    return [p for _, p in sorted(zip(keys, problems, strict=True), key=lambda kp: kp[0])]


TEMPLATE_NAME = "cluster-template.toml"


def template_text() -> str:
    """The commented cluster.toml ``clustereval init`` writes (it loads as-is: this machine alone)."""
    import socket
    from importlib.resources import files

    host = socket.gethostname().split(".")[0] or "localhost"
    text = files("clustereval.data").joinpath(TEMPLATE_NAME).read_text()
    return text.replace("@HOST@", host if _NODE_RE.match(host) else "localhost")

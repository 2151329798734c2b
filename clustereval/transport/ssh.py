"""Run commands on nodes through the OpenSSH client.

The system ``ssh`` binary is used on purpose: the user's ``~/.ssh/config`` (Host aliases,
ProxyJump, ControlMaster), their agent and their known_hosts all keep working. Every option we
add is built in ``ssh_options`` with the reason it is there.

The remote login shell only ever parses ``sh -s``: one line of plain words that csh, tcsh, fish or
any POSIX shell runs the same way. The command itself (built with ``shell_join``, so no argument,
environment value or path is ever interpreted) goes to that ``sh`` on stdin. Multi-line scripts
inside quotes on the command line are what csh-family login shells reject ("Unmatched '").
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from clustereval.config import SshConfig
from clustereval.errors import CommandTimeout, ConnectionLost, TransportError
from clustereval.records import CommandResult
from clustereval.transport.base import (
    DEFAULT_TIMEOUT_S,
    GET_SCRIPT,
    UNTAR_INTO,
    WRITE_FILE,
    Node,
    Transport,
    env_prefix,
    pack_argv,
    popen_held_stdin,
    run_parallel,
    shell_join,
    unpack_argv,
)

# A name no Host block of a user's ssh configuration names (.invalid is reserved, RFC 2606): what ssh
# resolves for it is what a node name with no settings of its own gets
UNNAMED_HOST = "clustereval-unnamed-host.invalid"
SSH_FAILED = 255  # ssh's own exit code for a failure of ssh itself (not of the remote command)
KILL_GRACE_S = 5  # a remote command past its timeout gets SIGTERM, then SIGKILL this much later
LOCAL_MARGIN_S = 15  # the local ssh waits this much longer than the remote timeout before giving up
# From this many nodes on, each node gets one SSH connection that its commands share (ControlMaster):
# a fresh connection costs the controller ~85 ms of CPU (key exchange, authentication) against ~8 ms
# for a session on an open one, and the inventory runs some twenty commands per node, so at 1024
# nodes that is the difference between half an hour and three minutes of the controller's CPU.
# Below it the saving is seconds and every command keeps a connection of its own.
MULTIPLEX_FROM_NODES = 64
MASTER_PERSIST_S = 60  # an idle shared connection closes itself this long after its last command
# Nodes served at once when commands share connections. A node's own part of a step takes seconds
# (nvidia-smi on 8 GPUs, a torch import from a shared filesystem) against milliseconds of the
# controller's, so the step's wall time is the node count / the fan-out × a node's time: 32 at a time
# would hold 1024 nodes' inventory to 32 waves. 128 ssh clients are ~400 of the controller's file
# descriptors, under the common 1024 limit.
MULTIPLEX_FANOUT = 128

# A long-running remote command (torchrun) must not outlive the controller: without a terminal, a
# dropped ssh connection does not signal the remote process. The wrapper starts the command in its
# own session, then waits for the connection's stdin to close (ssh killed, connection lost) and
# signals the whole process group. ``$1`` is the command string to run.
# (A background job's stdin is /dev/null in sh, so the connection's stdin is kept on fd 3.)
_WATCHDOG = ('exec 3<&0; setsid sh -c "$1" </dev/null 3<&- & pid=$!; '
             '{ cat <&3 >/dev/null; kill -TERM -$pid; sleep 5; kill -KILL -$pid; } >/dev/null 2>&1 & '
             'watch=$!; exec 3<&-; wait $pid; rc=$?; kill $watch 2>/dev/null; exit $rc')


def ssh_options(cfg: SshConfig) -> list[str]:
    """Every ssh option clustereval sets, in one place, as argv.

    ssh keeps the first value it sees for an option, so the user's extra ``options`` go first:
    where they set the same key as we do (StrictHostKeyChecking=yes, a longer ConnectTimeout),
    theirs wins. Command-line options in turn win over ~/.ssh/config.
    """
    opts: list[str] = []
    for opt in cfg.options:
        opts += ["-o", opt]
    if cfg.config_file:
        # an explicit config file replaces ~/.ssh/config (e.g. a generated one per cluster)
        opts += ["-F", str(Path(cfg.config_file).expanduser())]
    opts += [
        # never prompt for a password or passphrase: a missing key must fail now, not hang a phase
        "-o", "BatchMode=yes",
        # an unreachable node fails within seconds instead of the kernel's ~2 min TCP timeout
        "-o", f"ConnectTimeout={int(cfg.connect_timeout_s)}",
        # fresh nodes are unknown: record their key on first contact without a prompt, but still
        # refuse a key that changed (=no would silently accept a man in the middle)
        "-o", "StrictHostKeyChecking=accept-new",
        # notice a node that vanished mid-command (access revoked, node rebooted) within a minute
        "-o", "ServerAliveInterval=15",
        "-o", "ServerAliveCountMax=4",
        # keep "Warning: Permanently added ..." out of the command's stderr; errors still print
        "-o", "LogLevel=ERROR",
        # no terminal: stdout and stderr stay separate and byte-exact
        "-T",
    ]
    if cfg.port is not None:
        # only when configured: otherwise ~/.ssh/config (or ssh's default) decides the port
        opts += ["-p", str(int(cfg.port))]
    if cfg.user:
        opts += ["-l", cfg.user]
    if cfg.identity_file:
        # with many agent keys, offering only the named key avoids "Too many authentication failures"
        opts += ["-i", str(Path(cfg.identity_file).expanduser()), "-o", "IdentitiesOnly=yes"]
    return opts


def remote_command(argv: list[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                   timeout_s: float | None = None) -> str:
    """The one string the remote login shell parses: every word quoted.

    ``timeout_s`` wraps the command in coreutils ``timeout`` so it dies on the node when its
    time is up (killing the local ssh alone would leave it running there).
    """
    words = list(env_prefix(env)) + [str(a) for a in argv]
    if timeout_s is not None:
        words = ["timeout", "-k", str(KILL_GRACE_S), f"{max(1, int(round(timeout_s)))}"] + words
    command = shell_join(words)
    if cwd:
        command = f"cd {shlex.quote(cwd)} && {command}"
    return command


# What the login shell parses: a POSIX sh that reads the real command from stdin.
LOGIN_LINE = "sh -s"
# Characters a csh-family login shell treats specially even inside single quotes.
_CSH_UNSAFE = ("\n", "!")


def remote_script(argv: list[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                  timeout_s: float | None = None, stdin: str | None = None) -> str:
    """The script ``sh -s`` reads on the node: the command line, fed ``stdin`` when there is one.

    ``sh`` may read its script ahead in blocks (dash does), so data for the command cannot follow
    the script on the same stream; it travels inside the script, quoted, piped into the command."""
    command = remote_command(argv, env=env, cwd=cwd, timeout_s=timeout_s)
    if stdin:
        command = f"printf '%s' {shlex.quote(stdin)} | {{ {command}; }}"
    return command + "\n"


def csh_unsafe(line: str) -> str:
    """The first character of ``line`` a csh-family login shell would change ('' when none)."""
    return next((c for c in _CSH_UNSAFE if c in line), "")


# ---- classifying ssh's own failures ----------------------------------------------------------

# (regex on ssh's stderr, error id, message, hint, transient). The first match wins.
_SSH_FAILURES: list[tuple[str, str, str, str, bool]] = [
    (r"Connection refused", "ssh-unreachable", "refused the connection",
     "nothing listens on port {port} there: check that sshd runs on {node} and that port {port} is its "
     "SSH port ([ssh] port in cluster.toml)", False),
    (r"No route to host", "ssh-unreachable", "no route to the host",
     "check {address} in the hostfile and that this machine can reach that network", False),
    (r"Network is unreachable", "ssh-unreachable", "the network is unreachable from here",
     "check {address} in the hostfile and this machine's routes (a VPN or a bastion: [ssh] options = "
     "[\"ProxyJump=HOST\"])", False),
    (r"Could not resolve hostname|Name or service not known|nodename nor servname",
     "ssh-unresolvable", "the name does not resolve",
     "use an IP address in the hostfile, or a name this machine resolves", False),
    (r"Connection timed out during banner exchange|banner exchange", "ssh-unreachable",
     "accepted TCP but sshd did not answer in time",
     "the node may be overloaded; run again, or raise [ssh] connect_timeout_s", True),
    (r"Connection timed out|Operation timed out", "ssh-unreachable",
     "did not answer within {timeout} s",
     "the node may be down, or a firewall drops port {port}", True),
    (r"Permission denied", "ssh-auth", "rejected the login (no accepted key)",
     "passwordless SSH is required: put your public key in ~/.ssh/authorized_keys of the login user on "
     "{node}, or set [ssh] user / identity_file in cluster.toml", False),
    (r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed", "ssh-host-key",
     "its host key does not match the one in known_hosts",
     "if the node was reinstalled, remove the old key with `ssh-keygen -R {address}` and run again", False),
    (r"Session open refused by peer|mux_client_request_session", "ssh-unreachable",
     "refused one more session on the connection its commands share",
     "sshd limits the sessions of one connection (MaxSessions, 10 by default); run again, or raise MaxSessions "
     "on the nodes", True),
    (r"Connection reset|Connection closed by|kex_exchange_identification|Broken pipe",
     "ssh-unreachable", "closed the connection during setup",
     "sshd may be restarting or limiting new connections (MaxStartups); run again", True),
]


# ssh's own words when an established connection drops. With LogLevel=ERROR only the remote close
# prints; the keepalive verdict ("Timeout, server ... not responding") is logged at INFO and hidden,
# so a connection lost to silence leaves ssh exiting 255 with an empty stderr.
_LOST = re.compile(r"closed by remote host|Timeout, server .* not responding|"
                   r"client_loop: send disconnect|Connection to \S+ closed")
PROBE_TIMEOUT_S = 20.0  # the reachability check that tells a dropped connection from a command exiting 255


def _what(argv: list[str]) -> str:
    """The command as a Gap can name it; '' for a shell script (the caller names that better)."""
    if len(argv) >= 2 and argv[0] in ("sh", "bash") and argv[1] == "-c":
        return ""
    words = [a for a in argv if not a.startswith("-")][:3]
    text = " ".join(words)
    return text if len(text) <= 80 else text[:77] + "..."


def _ssh_lines(stderr: str) -> list[str]:
    return [ln.strip() for ln in stderr.splitlines() if ln.strip()]


class SshTransport(Transport):
    """``Transport`` over the OpenSSH client.

    A node is reached by its name when the user's ssh configuration has settings for that name (a
    ``Host gpu-a`` block with its HostName, Port, User or ProxyJump: ``ssh -G`` tells, without touching
    the network), and at its hostfile address otherwise. The rendezvous always uses the hostfile
    address: it is the address the nodes reach each other at.
    """

    method = "ssh"

    def __init__(self, cfg: SshConfig, *, ssh_binary: str = "ssh", multiplex: bool = False) -> None:
        """``multiplex``: every node's commands share one connection to it (``make_transport`` turns
        it on from ``MULTIPLEX_FROM_NODES`` nodes). A user's own ``ControlMaster``/``ControlPath`` in
        ``[ssh] options`` wins over ours, as every option of theirs does."""
        self.cfg = cfg
        self.ssh_binary = ssh_binary
        self._ports: dict[str, str] = {}
        self._hosts: dict[str, str] = {}
        self._baseline: dict[str, str] | None = None
        self._lock = threading.Lock()
        self.multiplex = multiplex
        if multiplex:
            self.fanout = MULTIPLEX_FANOUT
        self._control_dir = ""  # made on first use; short, since a socket path is limited to ~100 bytes
        self._masters: set[str] = set()

    # -- argv -----------------------------------------------------------------------------------
    def ssh_argv(self, node: Node, command: str, *, fresh: bool = False) -> list[str]:
        """``fresh``: a connection of its own even when commands share one (the check that tells a
        lost node from a command that exited 255 must not ride on the connection it doubts)."""
        host = self.host_of(node)
        # "--" ends options: an address can never be read as one
        return [self.ssh_binary, *ssh_options(self.cfg), *self._mux_options(host, fresh), "--", host, command]

    def _mux_options(self, host: str, fresh: bool) -> list[str]:
        if not self.multiplex:
            return []
        if fresh:
            return ["-o", "ControlPath=none"]
        with self._lock:
            if not self._control_dir:
                self._control_dir = tempfile.mkdtemp(prefix="ce-ssh-")
            self._masters.add(host)
        # the first command to a host becomes its shared connection (auto), which stays up for
        # MASTER_PERSIST_S after the last session; %C is a hash of host, port and user (fixed length)
        return ["-o", "ControlMaster=auto", "-o", f"ControlPath={self._control_dir}/%C",
                "-o", f"ControlPersist={MASTER_PERSIST_S}"]

    def close(self) -> None:
        """Close the shared connections (``ssh -O exit``) and remove their sockets; idempotent."""
        with self._lock:
            masters, self._masters = sorted(self._masters), set()
            folder, self._control_dir = self._control_dir, ""
        if not folder:
            return

        def stop(host: str) -> None:
            argv = [self.ssh_binary, *ssh_options(self.cfg), "-o", f"ControlPath={folder}/%C", "-O", "exit", "--", host]
            try:
                subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
            except (OSError, subprocess.SubprocessError):
                pass  # a master that does not answer ends itself after MASTER_PERSIST_S

        run_parallel(masters, stop, self.fanout)
        shutil.rmtree(folder, ignore_errors=True)

    def _resolved(self, host: str) -> dict[str, str] | None:
        """``ssh -G HOST``: the settings ssh would use for HOST, with HOST itself written as %h so
        that two hosts the configuration treats alike compare equal. None when ssh cannot say."""
        try:
            proc = subprocess.run([self.ssh_binary, *ssh_options(self.cfg), "-G", "--", host],
                                  capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            return None
        if proc.returncode != 0:
            return None
        own = re.compile(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])")
        settings = {}
        for line in proc.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key != "host":
                settings[key] = own.sub("%h", value)
        return settings

    def host_of(self, node: Node) -> str:
        """What ssh connects to for ``node``: its name when the ssh configuration knows that name
        (its settings for the name differ from those for a name no ``Host`` block names, so only
        ``Host *`` applies), else the hostfile address."""
        if node.name == node.address or not node.name:
            return node.address
        with self._lock:
            if node.name not in self._hosts:
                if UNNAMED_HOST not in self._hosts:
                    self._baseline = self._resolved(UNNAMED_HOST)
                    self._hosts[UNNAMED_HOST] = UNNAMED_HOST
                by_name = self._resolved(node.name)
                known = by_name is not None and self._baseline is not None and by_name != self._baseline
                self._hosts[node.name] = node.name if known else node.address
            return self._hosts[node.name]

    def describe(self) -> str:
        parts = ["ssh"]
        if self.cfg.port is not None:
            parts.append(f"port {self.cfg.port}")
        if self.cfg.user:
            parts.append(f"user {self.cfg.user}")
        return ", ".join(parts)

    # -- errors ---------------------------------------------------------------------------------
    def port_of(self, node: Node) -> str:
        """The port ssh really uses for ``node`` (``ssh -G`` resolves ~/.ssh/config; no network)."""
        if self.cfg.port is not None:
            return str(self.cfg.port)
        host = self.host_of(node)
        with self._lock:
            if host not in self._ports:
                port = "22"
                try:
                    proc = subprocess.run([self.ssh_binary, *ssh_options(self.cfg), "-G", "--", host],
                                          capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
                    m = re.search(r"^port (\d+)$", proc.stdout, re.MULTILINE)
                    port = m.group(1) if m else port
                except (OSError, subprocess.SubprocessError):
                    pass
                self._ports[host] = port
            return self._ports[host]

    def where(self, node: Node) -> str:
        host = self.host_of(node)
        if host != node.address:
            return f"{node.name} (Host {host} of the ssh configuration, port {self.port_of(node)})"
        return f"{node.name} ({node.address}:{self.port_of(node)})"

    def error_for(self, node: Node, rc: int, stderr: str, *, seconds: float | None = None,
                  during: str = "") -> TransportError | None:
        """A ``TransportError`` when ``rc``/``stderr`` are ssh's own failure; None when the remote
        command ran (whatever its exit code).

        ``seconds``: how long the command had run. Given, an exit 255 with an empty stderr is told
        apart from a remote command that exited 255 by one fresh ``ssh NODE true``: when that fails
        too, the connection was lost (``connection-lost``)."""
        if rc != SSH_FAILED:
            return None
        lines = _ssh_lines(stderr)
        text = "\n".join(lines)
        if _LOST.search(text) or (not lines and seconds is not None and not self._answers(node)):
            return self._lost(node, seconds or 0.0, during)
        fields = {"node": node.name, "address": self.host_of(node), "port": self.port_of(node),
                  "timeout": self.cfg.connect_timeout_s}
        for pattern, error_id, message, hint, transient in _SSH_FAILURES:
            if re.search(pattern, text):
                return TransportError(node.name, message.format(**fields), hint.format(**fields),
                                      error_id=error_id, transient=transient, where=self.where(node))
        own = [ln for ln in lines if ln.startswith(("ssh:", "ssh_", "kex_", "channel ", "mux_", "ControlSocket"))]
        if own:
            return TransportError(node.name, f"ssh failed: {own[-1]}",
                                  f"try `ssh {self.host_of(node)} true` by hand to see the full error",
                                  error_id="ssh-failed", where=self.where(node))
        return None  # the remote command itself exited 255

    def _answers(self, node: Node) -> bool:
        """Whether a fresh connection to ``node`` runs ``true`` now."""
        try:
            proc = subprocess.run(self.ssh_argv(node, "true", fresh=True), stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=PROBE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0

    def _lost(self, node: Node, seconds: float, during: str) -> ConnectionLost:
        what = f" during `{during}`" if during else ""
        return ConnectionLost(node.name, f"the connection was lost after {seconds:.0f} s{what}",
                              f"{node.name} stopped answering (rebooted, lost its network, or access was revoked); "
                              f"check it with `ssh {self.host_of(node)} true`, then `clustereval run --resume RUN_DIR`",
                              where=self.where(node), after_s=seconds, during=during)

    def _raise_for(self, node: Node, result: CommandResult) -> CommandResult:
        err = self.error_for(node, result.rc, result.stderr, seconds=result.seconds, during=_what(result.argv))
        if err is not None:
            raise err
        return result

    # -- run / popen ----------------------------------------------------------------------------
    def run(self, node: Node, argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: str | None = None) -> CommandResult:
        script = remote_script(argv, env=env, cwd=cwd, timeout_s=timeout_s, stdin=stdin)
        full = self.ssh_argv(node, LOGIN_LINE)
        start = time.monotonic()
        try:
            proc = subprocess.run(full, input=script, capture_output=True, text=True,
                                  errors="replace", timeout=timeout_s + LOCAL_MARGIN_S)
        except subprocess.TimeoutExpired:
            # the remote `timeout` should have ended it; the connection itself is hanging
            raise CommandTimeout(node.name, f"no answer over SSH within {timeout_s + LOCAL_MARGIN_S:.0f} s",
                                 "the node or the network path to it stopped responding",
                                 transient=True, where=self.where(node)) from None
        except FileNotFoundError:
            raise TransportError(node.name, f"{self.ssh_binary}: command not found",
                                 "install the OpenSSH client (apt-get install openssh-client)",
                                 error_id="ssh-missing", where=self.where(node)) from None
        seconds = round(time.monotonic() - start, 3)
        # remote `timeout` exits 124 when the time ran out (137 after the KILL grace)
        timed_out = proc.returncode in (124, 137) and seconds >= timeout_s - 0.5
        result = CommandResult(node=node.name, argv=list(argv), rc=proc.returncode, stdout=proc.stdout,
                               stderr=proc.stderr + (f"\ntimed out after {timeout_s:.0f} s" if timed_out else ""),
                               seconds=seconds, timed_out=timed_out)
        return self._raise_for(node, result)

    def popen(self, node: Node, argv: list[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
        """Start a long-running command; stdout and stderr come back merged on ``proc.stdout``.

        Killing the returned process, losing the connection, or this controller exiting stops
        the remote command and all its children. The handle is the command's lifetime: once the
        ``Popen`` object is garbage collected, the remote command is stopped too.
        """
        command = remote_command(argv, env=env, cwd=cwd)
        # the script line for `sh -s`; exec hands the connection's stdin to the watchdog unread
        script = ("exec " + shell_join(["sh", "-c", _WATCHDOG, "sh", command]) + "\n").encode()
        # ssh's stdin reaches EOF exactly when the handle or this process goes away; the script is
        # written before the start, so it must fit the pipe's buffer
        if len(script) >= 32768:
            raise TransportError(node.name, f"a background command of {len(script)} bytes is too long",
                                 "pass large inputs as files", error_id="command-too-long",
                                 where=self.where(node))
        return popen_held_stdin(self.ssh_argv(node, LOGIN_LINE), script)

    # -- files ----------------------------------------------------------------------------------
    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        """``remote`` becomes a copy of ``local``: a file is written there (parents created), a
        directory is merged into it. Streams over the same ssh options (ProxyJump etc. apply)."""
        local = Path(local)
        if local.is_dir():
            tar = subprocess.Popen(pack_argv(local), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                self._stream(node, UNTAR_INTO, [remote], stdin=tar.stdout, timeout_s=timeout_s, what=f"copy {local}")
            finally:
                tar.kill() if tar.poll() is None else None
                tar.wait()
            return
        if not local.is_file():
            raise TransportError(node.name, f"cannot copy {local}: no such file or directory",
                                 "check the local path", error_id="copy-failed", where=self.where(node))
        mode = f"{local.stat().st_mode & 0o777:o}"
        with open(local, "rb") as fh:
            self._stream(node, WRITE_FILE, [remote, mode], stdin=fh, timeout_s=timeout_s, what=f"copy {local}")

    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        """``local`` becomes a copy of ``remote`` (a file, or a directory merged into ``local``)."""
        local = Path(local)
        # one round trip: a type byte, then the file's bytes or a tar of the directory
        command = shell_join(["sh", "-c", GET_SCRIPT, "sh", remote]) + "\n"
        # unbuffered: the type byte must be read alone, the rest of the stream goes to tar untouched
        proc = subprocess.Popen(self.ssh_argv(node, LOGIN_LINE), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(command.encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass
            assert proc.stdout is not None
            kind = proc.stdout.read(1)
            if kind == b"D":
                local.mkdir(parents=True, exist_ok=True)
                untar = subprocess.run(unpack_argv(local), stdin=proc.stdout, capture_output=True)
                untar_err = untar.stderr.decode(errors="replace").strip() if untar.returncode else ""
            elif kind == b"F":
                local.parent.mkdir(parents=True, exist_ok=True)
                with open(local, "wb") as fh:
                    while chunk := proc.stdout.read(1 << 20):
                        fh.write(chunk)
                untar_err = ""
            else:
                proc.stdout.read()
                untar_err = ""
            stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            rc = proc.wait()
        finally:
            timer.cancel()
        if timer.finished.is_set() and rc != 0 and not stderr:
            raise CommandTimeout(node.name, f"copy of {remote} did not finish within {timeout_s:.0f} s",
                                 "a large copy needs a larger timeout", where=self.where(node))
        err = self.error_for(node, rc, stderr)
        if err is not None:
            raise err
        if rc != 0 or untar_err:
            why = (untar_err or stderr.strip() or f"exit {rc}").splitlines()[-1]
            raise TransportError(node.name, f"copy of {remote} to {local} failed: {why}",
                                 "check the remote path exists and is readable", error_id="copy-failed",
                                 where=self.where(node))

    def _stream(self, node: Node, script: str, args: list[str], *, stdin, timeout_s: float, what: str) -> None:
        # stdin carries the data here, so this one-line script stays on the command line; its words
        # are checked to read the same in a csh-family login shell
        command = shell_join(["sh", "-c", script, "sh", *args])
        if csh_unsafe(command):
            raise TransportError(node.name, f"refusing to copy to {args[0]!r}: it holds "
                                 f"{csh_unsafe(command)!r}, which a csh-family login shell would change",
                                 "choose a path without that character", error_id="unsafe-remote-line",
                                 where=self.where(node))
        try:
            proc = subprocess.run(self.ssh_argv(node, command), stdin=stdin, capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(node.name, f"{what} did not finish within {timeout_s:.0f} s",
                                 "a large copy needs a larger timeout", where=self.where(node)) from None
        stderr = proc.stderr.decode(errors="replace")
        err = self.error_for(node, proc.returncode, stderr)
        if err is not None:
            raise err
        if proc.returncode != 0:
            why = (stderr.strip() or f"exit {proc.returncode}").splitlines()[-1]
            raise TransportError(node.name, f"{what} -> {args[0]} failed: {why}",
                                 "check the remote path is writable and has space", error_id="copy-failed",
                                 where=self.where(node))

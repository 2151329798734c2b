"""The stand-in API server itself: the exec channel protocols it speaks to clients.

A pod here runs its commands on this machine (no namespace), so these tests need neither root
nor the test bed: the real kubectl for v5, a hand-rolled WebSocket client for the v4 fallback."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
import subprocess
from urllib.parse import urlencode

import pytest

from tests.kubeapi import KubeApiServer, Pod
from tests.kubeapi.bed import kubectl_unavailable_reason

LOCAL = ["sh", "-c", 'exec sh -c "$0" sh "$@"']  # runs `sh -c SCRIPT ARGS` right here


@pytest.fixture
def api(tmp_path):
    reason = kubectl_unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = KubeApiServer()
    server.add_pod(Pod(name="local-0", namespace="trial", ip="127.0.0.1", netns="none", enter=LOCAL))
    server.start()
    server.token = server.add_user("admin")
    server.kubeconfig_path = server.kubeconfig(tmp_path / "kubeconfig", token=server.token)
    try:
        yield server
    finally:
        server.close()


def _ws_exec(api: KubeApiServer, command: list[str], protocols: str) -> tuple[str, dict[int, bytes]]:
    """One exec over a raw WebSocket: (the protocol the server chose, bytes per channel)."""
    ctx = ssl.create_default_context()
    ctx.load_verify_locations(cadata=api.cert_pem[0].decode())
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", api.port), timeout=30), server_hostname="127.0.0.1")
    query = urlencode([("command", c) for c in command] + [("stdout", "true"), ("stderr", "true")])
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /api/v1/namespaces/trial/pods/local-0/exec?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {api.token}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Sec-WebSocket-Protocol: {protocols}\r\n\r\n").encode())
    reader = sock.makefile("rb")
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += reader.read(1)
    lines = head.decode().split("\r\n")
    assert lines[0].startswith("HTTP/1.1 101"), head
    chosen = next(ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("sec-websocket-protocol:"))
    channels: dict[int, bytes] = {}
    while True:
        b1, b2 = reader.read(2)
        length = b2 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", reader.read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", reader.read(8))
        payload = reader.read(length)
        if b1 & 0x0F == 0x8:  # close
            break
        if payload:
            channels[payload[0]] = channels.get(payload[0], b"") + payload[1:]
    sock.close()
    return chosen, channels


def test_v4_is_spoken_when_the_client_offers_nothing_newer(api):
    chosen, channels = _ws_exec(api, ["sh", "-c", "echo out; echo err >&2; exit 5"], "v4.channel.k8s.io")
    assert chosen == "v4.channel.k8s.io"
    assert channels[1] == b"out\n" and channels[2] == b"err\n"
    final = json.loads(channels[3])
    assert final["status"] == "Failure" and final["details"]["causes"] == [{"reason": "ExitCode", "message": "5"}]


def test_v5_is_chosen_when_offered_first(api):
    chosen, channels = _ws_exec(api, ["true"], "v5.channel.k8s.io, v4.channel.k8s.io")
    assert chosen == "v5.channel.k8s.io" and json.loads(channels[3])["status"] == "Success"


def test_the_real_kubectl_streams_stdin_and_gets_the_exit_code(api):
    proc = subprocess.run(["kubectl", f"--kubeconfig={api.kubeconfig_path}", "exec", "-i", "local-0", "--", "sh", "-c",
                           "tr a-z A-Z; exit 7"], input="hello\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and proc.stdout == "HELLO\n"
    assert proc.stderr.strip() == "command terminated with exit code 7"

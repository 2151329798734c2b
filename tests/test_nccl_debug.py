"""The NCCL_DEBUG=INFO parser on hand-made INFO logs (named handmade-*; real captures join them)."""

import pytest

from clustereval.probes.nccl_debug import describe_path, parse_nccl_info


def _parse(fixtures, name, scope="intra-node"):
    return parse_nccl_info((fixtures / "nccl_debug" / name).read_text(), scope)


def test_two_gpu_nvlink_with_nvls_forced_off(fixtures):
    info = _parse(fixtures, "handmade-intra-2gpu-nvls-off.txt")
    assert info.version == "2.28.9+cuda13.0"
    assert info.transports == ["P2P/CUMEM"]
    assert info.network == "Socket"
    assert info.nvls_env == "0"
    assert info.nvls_available is None and info.nvls_used is False
    assert "peer-to-peer" in describe_path(info)


def test_eight_gpu_node_with_nvls_set_up(fixtures):
    info = _parse(fixtures, "handmade-intra-8gpu-nvls.txt")
    assert info.version == "2.27.7+cuda12.9"
    assert info.nvls_available is True and info.nvls_used is True


def test_inter_node_infiniband_gdrdma(fixtures):
    info = _parse(fixtures, "handmade-inter-ib-gdrdma.txt", "inter-node")
    assert info.scope == "inter-node"
    assert info.transports == ["P2P/CUMEM", "NET/IB"]
    assert info.network == "IB"
    assert info.nvls_available is False and info.nvls_used is False


def test_socket_fallback_behind_launcher_prefix(fixtures):
    info = _parse(fixtures, "handmade-inter-socket-fallback.txt", "inter-node")
    assert info.transports == ["NET/Socket"]
    assert info.nvls_env == "2"
    assert "TCP sockets" in describe_path(info)


def test_efa_libfabric_with_nvls(fixtures):
    info = _parse(fixtures, "handmade-inter-efa-libfabric.txt", "inter-node")
    assert info.network == "Libfabric"
    assert "NET/Libfabric" in info.transports
    assert info.nvls_env == "1" and info.nvls_used is True


@pytest.mark.parametrize("text", ["", "no nccl here\n", "NCCL WARN something\n"])
def test_nothing_logged_means_unknown_not_no(text):
    info = parse_nccl_info(text)
    assert info.version == "" and info.transports == []
    assert info.nvls_available is None and info.nvls_used is None


def test_real_h200_capture_p2p_over_nvlink_with_nvls_forced_off(fixtures):
    info = parse_nccl_info((fixtures / "nccl" / "h200x2-intra-info.txt").read_text(), "intra-node")
    assert info.version == "2.28.9+cuda13.0"
    assert info.transports == ["P2P/CUMEM"]
    assert info.network == "Socket"  # no IB device: NCCL's network plugin for inter-node would be TCP
    assert info.nvls_env == "0" and info.nvls_used is False  # "0 nvls channels"

"""The NCCL environment every collective runs with: the platform's values kept, one default added.

Pure: the platform's dump (``env`` on rank 0, filtered) and the operator's overrides in, the final
environment and who set each variable out.
"""

from __future__ import annotations

import re

PLATFORM = "platform"
DEFAULT = "clustereval default"
OPERATOR = "cluster.toml"
NCCL_PATTERN = re.compile(r"^(NCCL_|FI_|AWS_OFI)")


def parse_env_dump(text: str) -> dict[str, str]:
    """``env`` output -> the NCCL_*/FI_*/AWS_OFI* variables (the runbook's grep)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and NCCL_PATTERN.match(key) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            out[key] = value
    return out


def final_nccl_env(platform: dict[str, str], overrides: dict[str, str] | None = None
                   ) -> tuple[dict[str, str], dict[str, str]]:
    """(final env, var -> who set it). Platform values are never replaced by the default;
    ``NCCL_NVLS_ENABLE=2`` (auto) only when nobody set it. The operator's cluster.toml wins."""
    final = dict(platform)
    source = {k: PLATFORM for k in platform}
    for k, v in (overrides or {}).items():
        final[k] = v
        source[k] = OPERATOR
    if "NCCL_NVLS_ENABLE" not in final:
        final["NCCL_NVLS_ENABLE"] = "2"
        source["NCCL_NVLS_ENABLE"] = DEFAULT
    return final, source

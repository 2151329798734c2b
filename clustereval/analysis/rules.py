"""The table of rules: one row per judged figure. Pure.

Each row says what is judged, against which target (and where that target comes from: an operator
key under ``[targets]``, the spec database, the runbook author's published measured MAMF, the PCIe
link's generation and width), the fraction of the target that counts as met and why, and the word
the report uses for a miss. The report's Findings, ``summary.json``, JUnit and the exit status all
read the judgements made here (``judge``); ``docs/reference.md`` shows this table (a test checks it
against ``RULES``).

A figure is met when ``value >= fraction × target``. An operator target is used as the target itself
where the row says so (``operator_fraction``), since the operator states what the cluster should
deliver, not a spec sheet's peak.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class Rule:
    id: str  # "gpu.msmf"
    subsystem: str  # the Findings label: GPUs, GPU memory and links, fabric, local disk, shared network FS
    figure: str  # what is judged, in the report's words
    unit: str
    target: str  # where the target comes from when the operator gives none
    operator_key: str  # the [targets] key that replaces it ("" none)
    fraction: float  # of the reference target that counts as met
    operator_fraction: float  # of the operator's target that counts as met
    why: str  # why that fraction

    def bar(self, target: float, source: str) -> float:
        return target * (self.operator_fraction if source == "operator" else self.fraction)


_MAMF_WHY = ("the published figures come from one accelerator each; the runbook's author saw 5% and more between "
             "GPUs of one node, and software versions move them by a few per cent")
RULES: tuple[Rule, ...] = (
    Rule("gpu.mamf", "GPUs", "MAMF (GPU0's search)", "TFLOPS",
         "the runbook author's published measured MAMF for the model", "gpu_bf16_tflops", 0.90, 0.90,
         _MAMF_WHY + "; 10% below is beyond both"),
    Rule("gpu.msmf", "GPUs", "MSMF of each GPU", "TFLOPS",
         "the runbook author's published measured MAMF for the model", "gpu_bf16_tflops", 0.80, 0.80,
         "a matmul held at the power limit runs at a lower clock than MAMF's burst: healthy H100 and H200 boards "
         "sustain 86–91% of the published MAMF, so 80% leaves room for the spread between GPUs and not for a "
         "throttled one"),
    Rule("gpu.lemon", "GPUs", "lemon GEMM of each GPU (16384³ bf16)", "TFLOPS",
         "the runbook author's published measured MAMF for the model", "gpu_bf16_tflops", 0.80, 0.80,
         "one fixed large shape runs at the power limit like MSMF: healthy H200s reach 85–88% of the published "
         "MAMF"),
    Rule("gpupass.hbm-copy", "GPU memory and links", "HBM device-local copy of each GPU (bytes counted once)", "GB/s",
         "half the spec database's HBM TB/s (a copy reads and writes each byte)", "hbm_copy_gb_s", 0.80, 1.0,
         "a copy kernel reaches 85–90% of the HBM figure on H100 and H200 (nvbandwidth's own copy too)"),
    Rule("gpupass.pcie", "GPU memory and links", "PCIe host↔device copy of each GPU alone, each direction", "GB/s",
         "the link's maximum generation × width, one direction", "pcie_gb_s", 0.75, 1.0,
         "pinned copies reach 85–88% of a Gen5 x16 link (55 of 63 GB/s); a link trained at half width or one "
         "generation down falls to half"),
    Rule("gpupass.pcie-bidir", "GPU memory and links", "PCIe copy of each GPU both ways at once, each direction",
         "GB/s", "the link's maximum generation × width, one direction", "pcie_gb_s", 0.65, 0.85,
         "with both directions busy each reaches 74–81% of a Gen5 x16 link on H100 and H200 (nvbandwidth's "
         "bidirectional testcases too)"),
    Rule("gpupass.pcie-all", "GPU memory and links", "PCIe copy of each GPU while every GPU of its node copies",
         "GB/s", "the same GPU's copy alone", "", 0.75, 0.75,
         "GPUs that share a PCIe switch's uplink split it: two behind one switch get half each, so three quarters "
         "of the GPU's own figure separates a shared uplink from the noise"),
    Rule("gpupass.p2p-write", "GPU memory and links", "GPU-pair copy, the row's GPU writing into the column's", "GB/s",
         "the spec database's NVLink unidirectional figure per GPU", "nvlink_uni_gb_s", 0.75, 0.75,
         "NVIDIA's own floors for an H200 pair are 335 of 450 GB/s (74%)"),
    Rule("gpupass.p2p-read", "GPU memory and links", "GPU-pair copy, the row's GPU reading from the column's", "GB/s",
         "the spec database's NVLink unidirectional figure per GPU", "nvlink_uni_gb_s", 0.75, 0.75,
         "a read crosses the same links as a write the other way"),
    Rule("gpupass.p2p-bidir", "GPU memory and links", "GPU-pair copy both directions at once, summed", "GB/s",
         "twice the spec database's NVLink unidirectional figure per GPU", "nvlink_uni_gb_s", 0.75, 0.75,
         "each direction held to the one-way bar"),
    Rule("network.intra-allreduce", "fabric", "intra-node all-reduce peak busbw", "GB/s",
         "the NVLink (or PCIe) unidirectional spec per GPU", "nvlink_uni_gb_s", 0.70, 0.70,
         "a healthy ring all-reduce reaches 75–85% of the NVLink unidirectional spec (NVLS goes past 100%)"),
    Rule("network.inter-allreduce", "fabric", "inter-node all-reduce peak busbw", "GB/s",
         "none: never a share of the NICs' rate (the runbook's rule)", "internode_busbw_gb_s", 1.0, 1.0,
         "the operator's figure is what the fabric was sold to deliver"),
    Rule("storage.fio", "local disk / shared network FS", "each `fio` cell with an operator figure", "MiB/s or IOPS",
         "none: filesystem software publishes no figures", "storage", 0.95, 0.95,
         "the runbook calls two mounts equivalent within 5%, so a cell within 5% of its figure meets it"),
)
BY_ID = {r.id: r for r in RULES}


def rule(rule_id: str) -> Rule:
    return BY_ID[rule_id]


@dataclass
class Judged:
    """One figure of one unit judged by one rule."""

    rule: str
    subject: str  # `host(nodeN):gpuM`, a node, a mount, a GPU pair
    value: float
    target: float
    source: str  # "operator" | "published" | "spec" | "link" | "solo"
    met: bool

    @property
    def bar(self) -> float:
        return BY_ID[self.rule].bar(self.target, self.source)

    @property
    def share(self) -> float:
        return self.value / self.target if self.target else 0.0

    def to_dict(self) -> dict[str, Any]:
        r = BY_ID[self.rule]
        return {**asdict(self), "bar": round(self.bar, 3), "unit": r.unit, "figure": r.figure,
                "fraction": r.operator_fraction if self.source == "operator" else r.fraction}


def judge(rule_id: str, subject: str, value: float, target: float, source: str) -> Judged:
    r = BY_ID[rule_id]
    return Judged(rule_id, subject, value, target, source, value >= r.bar(target, source) - 1e-9)


def misses(judged: list[Judged]) -> list[Judged]:
    return [j for j in judged if not j.met]


# -- the published MAMF ----------------------------------------------------------------------


@lru_cache(maxsize=1)
def _mamf_table() -> dict[str, Any]:
    return tomllib.loads(resources.files("clustereval.data").joinpath("published_mamf.toml").read_text())


def published_mamf(spec_key: str) -> float | None:
    """The runbook author's measured MAMF for the spec database's model name, TFLOPS; None: not published."""
    return _mamf_table()["mamf_bf16_tflops"].get(spec_key)


MAMF_TABLE_URL: str = _mamf_table()["source_url"]
MAMF_READ_ON: str = _mamf_table()["read_on"]


def fraction_words(r: Rule, source: str) -> str:
    f = r.operator_fraction if source == "operator" else r.fraction
    return f"{f:.0%}"


def rules_markdown() -> str:
    """The table ``docs/reference.md`` shows under "Rules" (a test checks the two agree)."""
    lines = ["| rule | Findings label | figure | target (without an operator key) | operator key | met at | why |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in RULES:
        met = f"{r.fraction:.0%}" + (f" ({r.operator_fraction:.0%} of an operator figure)"
                                     if r.operator_fraction != r.fraction else "")
        key = f"`{r.operator_key}`" if r.operator_key else "—"
        lines.append(f"| `{r.id}` | {r.subsystem} | {r.figure} ({r.unit}) | {r.target} | {key} | {met} | {r.why} |")
    return "\n".join(lines) + "\n"

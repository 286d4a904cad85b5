"""Hardware catalogue: what each GPU model brings to a simulated cluster.

Every number cites where it comes from. NVLink figures are per GPU and per direction.
"""

from dataclasses import dataclass

from phantora.errors import CatalogueError


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model as the simulator sees it."""

    name: str
    """Catalogue key, e.g. ``"h100"``."""
    marketing_name: str
    """What ``torch.cuda.get_device_name()`` reports on the real part."""
    sm_arch: int
    """Compute capability as an integer (80, 90, 100); selects NCCL tuning constants."""
    sm_count: int
    memory_bytes: int
    hbm_gbs: float
    """HBM bandwidth in GB/s."""
    bf16_tflops: float
    """Dense BF16 tensor-core peak, TFLOP/s."""
    nvlink_generation: int
    nvlink_links: int
    nvlink_gbps: float
    """NVLink line rate per direction, Gbit/s (all links together)."""
    default_nic_gbps: float
    """NIC speed per GPU in the reference system (one NIC per GPU rail)."""


_GIB = 2**30

CATALOGUE: dict[str, GpuSpec] = {
    # H100 SXM5: 80 GB HBM3 3.35 TB/s, 989 TFLOP/s dense BF16, NVLink4 18 links x 25 GB/s per
    # direction = 450 GB/s (NVIDIA H100 datasheet); DGX H100: 8x ConnectX-7 400 Gb/s.
    # total_memory as the lent H100 reports it: 85,017,493,504 B (81,079 MiB).
    "h100": GpuSpec("h100", "NVIDIA H100 80GB HBM3", 90, 132, 85_017_493_504, 3350.0, 989.0,
                    4, 18, 3600.0, 400.0),
    # H200 SXM: 141 GB HBM3e 4.8 TB/s, same compute and NVLink as H100 (NVIDIA H200 datasheet).
    # The lent machines report 143771 MiB.
    "h200": GpuSpec("h200", "NVIDIA H200", 90, 132, 143771 * 2**20, 4800.0, 989.0,
                    4, 18, 3600.0, 400.0),
    # H100 SXM with 96 GB HBM2e at 2.4 TB/s, power-capped at 500 W: Meta's Grand Teton
    # platform, where TorchTitan's published numbers were taken (torchtitan docs/performance.md:
    # "96GB HBM2e with 2.4 TB/sec", "default 500W power limit", "400 Gb/s per GPU" RDMA;
    # a later revision says "95 GiB memory", taken as total_memory). Same SMs and NVLink 4 as
    # the SXM H100. Its sustained tensor throughput is not published (torchtitan: "between SXM
    # and NVL ... we don't know its exact value"); assumed here linear in the power cap between
    # H100 NVL (835 TFLOP/s dense BF16 at 400 W, NVL datasheet) and H100 SXM (989 at 700 W):
    # 835 + (989 - 835) * (500 - 400) / (700 - 400) = 886 TFLOP/s, uncertain by about 5%.
    "h100-hbm2e-96g": GpuSpec("h100-hbm2e-96g", "NVIDIA H100", 90, 132, 95 * _GIB, 2400.0,
                              886.0, 4, 18, 3600.0, 400.0),
    # A100 SXM4 80GB: 2.039 TB/s HBM2e, 312 TFLOP/s BF16, NVLink3 12 links x 25 GB/s per
    # direction = 300 GB/s (A100 datasheet); DGX A100: 8x ConnectX-6 200 Gb/s.
    "a100-80g": GpuSpec("a100-80g", "NVIDIA A100-SXM4-80GB", 80, 108, 80 * _GIB, 2039.0, 312.0,
                        3, 12, 2400.0, 200.0),
    # B200: 180 GB HBM3e 8 TB/s, ~2250 TFLOP/s dense BF16, NVLink5 18 links x 50 GB/s per
    # direction = 900 GB/s (DGX B200 datasheet); DGX B200: 8x ConnectX-7 400 Gb/s.
    "b200": GpuSpec("b200", "NVIDIA B200", 100, 148, 180 * 10**9, 8000.0, 2250.0,
                    5, 18, 7200.0, 400.0),
}


def lookup_gpu(name: str) -> GpuSpec:
    """The catalogue entry for ``name`` (case-insensitive)."""
    spec = CATALOGUE.get(name.lower())
    if spec is None:
        known = ", ".join(sorted(CATALOGUE))
        raise CatalogueError(f"unknown GPU {name!r}; the catalogue has: {known}")
    return spec

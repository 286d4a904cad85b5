"""Hardware catalogue: what each GPU model brings to a simulated cluster.

Every number cites where it comes from. NVLink figures are per GPU and per direction.
"""

from dataclasses import dataclass

from hwmodel.errors import CatalogueError


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
    power_w: float | None = None
    """Board power cap (W) of a TSMC 4N-class part (Hopper, Blackwell), which bounds its tensor
    rate (:attr:`tensor_tflops`); ``None``: not bounded by power in the model."""
    host_cpus_per_gpu: int = 28
    """Logical CPUs (hardware threads) per GPU in the reference system, the host's count over
    its GPUs: a simulated host of ``gpus_per_host`` GPUs has this many times as many
    (``cluster.cpus_per_host``), and its script sees them in ``os.cpu_count()``."""

    @property
    def tensor_tflops(self) -> float:
        """The dense BF16 rate the roofline's efficiency curves scale with: the datasheet peak,
        or the most the board's power cap feeds at :data:`TFLOPS_PER_WATT_4N` where lower."""
        if self.power_w is None:
            return self.bf16_tflops
        return min(self.bf16_tflops, self.power_w * TFLOPS_PER_WATT_4N)


TFLOPS_PER_WATT_4N = 989.0 / 700.0
"""Datasheet dense-BF16 TFLOP/s per board watt that a TSMC 4N-class GPU (Hopper, Blackwell)
sustains: the H100 SXM's, 989 at 700 W, at which its large GEMMs run at 80.7% of the datasheet
(798 TFLOP/s on a measured H100; 794.5 in stas00/ml-engineering's MAMF table), the ceiling of the
efficiency curves fitted on it. A part with more datasheet TFLOP/s per watt cannot hold its
clocks under dense tensor work, so its curves scale with what its cap feeds: the 500 W H100 of
Grand Teton 706 (not 886), the 1000 W B200 1413 (not 2250), i.e. ~1140 TFLOP/s on large GEMMs,
where SimuMax's B200 GEMM measurements of Llama-70B shapes lie (45-65% of 2250,
configs/system/b200_bf16_ceperm.json). Short bursts run faster before the cap settles:
ml-engineering's MAMF search reports 1745 on a B200, and the cap does not bind there."""

_GIB = 2**30

CATALOGUE: dict[str, GpuSpec] = {
    # H100 SXM5: 80 GB HBM3 3.35 TB/s, 989 TFLOP/s dense BF16, NVLink4 18 links x 25 GB/s per
    # direction = 450 GB/s (NVIDIA H100 datasheet); DGX H100: 8x ConnectX-7 400 Gb/s.
    # total_memory as a measured H100 80GB HBM3 reports it: 85,017,493,504 B (81,079 MiB).
    # DGX H100 CPUs: 2x Intel Xeon Platinum 8480C, 112 cores total (DGX H100/H200 user guide,
    # "Hardware Overview"), 224 threads with Hyper-Threading: 28 per GPU.
    "h100": GpuSpec("h100", "NVIDIA H100 80GB HBM3", 90, 132, 85_017_493_504, 3350.0, 989.0,
                    4, 18, 3600.0, 400.0, power_w=700.0, host_cpus_per_gpu=224 // 8),
    # H200 SXM: 141 GB HBM3e 4.8 TB/s, same compute and NVLink as H100 (NVIDIA H200 datasheet).
    # The measured H200s report 143771 MiB. DGX H200: the DGX H100's 2x Xeon Platinum 8480C,
    # 224 threads (DGX H100/H200 user guide): 28 per GPU.
    "h200": GpuSpec("h200", "NVIDIA H200", 90, 132, 143771 * 2**20, 4800.0, 989.0,
                    4, 18, 3600.0, 400.0, power_w=700.0, host_cpus_per_gpu=224 // 8),
    # H100 SXM with 96 GB HBM2e at 2.4 TB/s, power-capped at 500 W: Meta's Grand Teton
    # platform, where TorchTitan's published numbers were taken (torchtitan docs/performance.md:
    # "96GB HBM2e with 2.4 TB/sec", "default 500W power limit", "400 Gb/s per GPU" RDMA;
    # a later revision says "95 GiB memory", taken as total_memory). Same SMs and NVLink 4 as
    # the SXM H100. Its sustained tensor throughput is not published (torchtitan: "between SXM
    # and NVL ... we don't know its exact value"); assumed here linear in the power cap between
    # H100 NVL (835 TFLOP/s dense BF16 at 400 W, NVL datasheet) and H100 SXM (989 at 700 W):
    # 835 + (989 - 835) * (500 - 400) / (700 - 400) = 886 TFLOP/s, uncertain by about 5%.
    # Under dense tensor work the 500 W cap binds first: 706 TFLOP/s (tensor_tflops).
    # Grand Teton's CPU count is not in torchtitan's notes: the DGX H100's 28 threads per GPU.
    "h100-hbm2e-96g": GpuSpec("h100-hbm2e-96g", "NVIDIA H100", 90, 132, 95 * _GIB, 2400.0,
                              886.0, 4, 18, 3600.0, 400.0, power_w=500.0,
                              host_cpus_per_gpu=224 // 8),
    # A100 SXM4 80GB: 2.039 TB/s HBM2e, 312 TFLOP/s BF16, NVLink3 12 links x 25 GB/s per
    # direction = 300 GB/s (A100 datasheet); DGX A100: 8x ConnectX-6 200 Gb/s. TSMC N7, 400 W:
    # not power-bound in the model (its large GEMMs run at 86.9% of peak, ml-engineering MAMF).
    # DGX A100 CPUs: 2x AMD EPYC 7742, 128 cores total (DGX A100 datasheet), 256 threads with
    # SMT: 32 per GPU.
    "a100-80g": GpuSpec("a100-80g", "NVIDIA A100-SXM4-80GB", 80, 108, 80 * _GIB, 2039.0, 312.0,
                        3, 12, 2400.0, 200.0, host_cpus_per_gpu=256 // 8),
    # B200: 180 GB HBM3e 8 TB/s, ~2250 TFLOP/s dense BF16, NVLink5 18 links x 50 GB/s per
    # direction = 900 GB/s (DGX B200 datasheet); DGX B200: 8x ConnectX-7 400 Gb/s; 1000 W per
    # GPU (HGX B200), which feeds 1413 TFLOP/s of tensor work (tensor_tflops). DGX B200 CPUs:
    # 2x Intel Xeon Platinum 8570, 112 cores total (DGX B200 datasheet), 224 threads: 28 per GPU.
    "b200": GpuSpec("b200", "NVIDIA B200", 100, 148, 180 * 10**9, 8000.0, 2250.0,
                    5, 18, 7200.0, 400.0, power_w=1000.0, host_cpus_per_gpu=224 // 8),
}


def lookup_gpu(name: str) -> GpuSpec:
    """The catalogue entry for ``name`` (case-insensitive)."""
    spec = CATALOGUE.get(name.lower())
    if spec is None:
        known = ", ".join(sorted(CATALOGUE))
        raise CatalogueError(f"unknown GPU {name!r}; the catalogue has: {known}")
    return spec

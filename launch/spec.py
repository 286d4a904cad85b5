"""What a rank is launched with: the first message of the launcher's control channel
(:mod:`wire.control`), read by the fork server and every rank it forks."""

from dataclasses import dataclass, field
from pathlib import Path

from hwmodel.catalogue import GpuSpec
from launch.program import Program
from launch.value_policy import ValuePolicy


@dataclass(frozen=True, slots=True)
class HostChoice:
    """The simulated host: its profile (``cluster.host``: a bundled profile's name or a profile
    file's absolute path, ``hwmodel.measured.host_profile``) and its speed against it
    (``cluster.host_speed``); ``profile`` ``None``: ``host_cpu``'s reference host, else the
    GPU's. ``cpus``: how many CPUs the host has."""

    profile: str | None = None
    speed: float = 1.0
    cpus: int | None = None
    """Logical CPUs the script sees on its host (``cluster.cpus_per_host``:
    ``intercept.process.host_cpus``); ``None``: this machine's own."""


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything a rank needs to start; built by the launcher (:mod:`launch.launcher`), sent to
    the fork server (``intercept.process.fork_server``), read by each rank."""

    program: Program
    args: tuple[str, ...]
    env: dict[str, str]
    """The scenario's variables, applied before torchrun's own."""
    world_size: int
    ranks_per_host: int
    gpu: GpuSpec
    gpus_per_host: int
    out_dir: Path
    fake_device: bool
    """Prepare the fake CUDA device in the fork server and enter fake mode in every rank."""
    epoch_ns: int
    op_cost_ns: int | None
    """Reproducible mode's fixed cost per intercepted op; ``None`` measures CPU time."""
    master_addr: str
    master_port: int
    run_id: str
    rank_fds: dict[int, int] = field(default_factory=dict)
    """Rank -> the fd of its end of the coordinator connection (inherited by the fork server)."""
    host_cpu: str | None = None
    """Reference host whose CPU speed the script's CPU time is scaled to
    (``intercept.host_time.host_speed``); ``None`` or ``"native"`` counts it as measured here."""
    values: ValuePolicy = ValuePolicy()
    """The value model: routing, seed, what unknown data-dependent shapes do."""
    counted: bool = False
    """Count the script's Python work instead of measuring its CPU time
    (``intercept.host_time.python_work``; ``simulation.host_time: counted``); needs the fake
    device."""
    calibration: Path | None = None
    """Kernel calibration file the ranks' compute model costs kernels from
    (``cluster.calibration``); ``None``: the packaged tables of ``gpu``."""
    host: HostChoice = HostChoice()
    """The host profile the ranks' host costs come from, and its speed."""

    def log_path(self, rank: int) -> Path:
        return self.out_dir / "ranks" / f"rank{rank}.log"

    def rank_env(self, rank: int) -> dict[str, str]:
        """The variables torchrun sets for ``rank`` (``torch.distributed.run``)."""
        hosts = self.world_size // self.ranks_per_host
        return {
            "RANK": str(rank), "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(rank % self.ranks_per_host),
            "LOCAL_WORLD_SIZE": str(self.ranks_per_host),
            "GROUP_RANK": str(rank // self.ranks_per_host), "GROUP_WORLD_SIZE": str(hosts),
            "ROLE_NAME": "default", "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(self.world_size),
            "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_RUN_ID": self.run_id, "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "False",
        }

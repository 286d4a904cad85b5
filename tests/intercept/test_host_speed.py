"""Host-speed normalisation: the benchmark's bookkeeping, the shipped references, and the clock's
scaling of script CPU time (deterministic: the clock's CPU readings are faked)."""

import threading
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

import pytest

from hwmodel.measured import host_references
from hwmodel.measured.host_references import NATIVE, ReferenceHost, SpeedRatio, parse_references
from intercept.host_time import clock as clock_module
from intercept.host_time import host_benchmark
from intercept.host_time.clock import VirtualClock
from intercept.host_time.host_benchmark import COMPONENTS
from intercept.host_time.host_speed import HostSpeed, host_speed_for


def document(**changes: Any) -> dict[str, Any]:
    """A valid ``host_speed.json`` document, with top-level ``changes``."""
    base: dict[str, Any] = {
        "benchmark_version": host_references.BENCHMARK_VERSION,
        "fallback": "slow-host",
        "hosts": {
            "slow-host": {"gpus": ["h100"], "components_ns": {"bytecode": 400, "calls": 600}},
            "fast-host": {"gpus": ["h200", "b200"], "components_ns": {"bytecode": 100}},
        },
    }
    return {**base, **changes}


# -- arithmetic --------------------------------------------------------------------------------

def test_ratio_scales_with_exact_integer_arithmetic() -> None:
    assert SpeedRatio(3, 4).scale(1_000) == 750
    assert SpeedRatio(1, 3).scale(10) == 3  # floored
    assert SpeedRatio(5, 2).scale(7) == 17
    assert SpeedRatio(2, 1).factor == 2.0
    big = 10**15  # an hour of CPU in ns times a large ratio stays exact
    assert SpeedRatio(999_999_937, 1_000_000_007).scale(big) == big * 999_999_937 // 1_000_000_007


@pytest.mark.parametrize("reference_ns,local_ns", [(0, 1), (1, 0), (-5, 3)])
def test_ratio_refuses_non_positive_times(reference_ns: int, local_ns: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        SpeedRatio(reference_ns, local_ns)


def test_reference_compares_only_the_components_both_sides_have() -> None:
    host = ReferenceHost("r", ("h100",), {"bytecode": 100, "calls": 300, "torch_ops": 50}, "")
    # torch not imported locally: no torch_ops; "objects" unknown to the reference
    assert host.ratio({"bytecode": 50, "calls": 150, "objects": 999}) == SpeedRatio(400, 200)
    with pytest.raises(ValueError, match="no benchmark component in common"):
        host.ratio({"objects": 10})


# -- the references ----------------------------------------------------------------------------

def test_references_pick_the_host_of_the_gpu_else_the_fallback() -> None:
    references = parse_references(document())
    assert references.for_gpu("h200").name == "fast-host"
    assert references.for_gpu("b200").name == "fast-host"
    assert references.for_gpu("h100").name == "slow-host"
    assert references.for_gpu("a100-80g").name == "slow-host"  # no host names it


@pytest.mark.parametrize("changes,match", [
    ({"benchmark_version": host_references.BENCHMARK_VERSION + 1}, "benchmark version"),
    ({"fallback": "nowhere"}, "fallback"),
    ({"hosts": {"native": {"gpus": [], "components_ns": {"calls": 1}}}, "fallback": "native"},
     "native"),
    ({"hosts": {"h": {"gpus": [], "components_ns": {"warp_speed": 1}}}, "fallback": "h"},
     "components"),
    ({"hosts": {"h": {"gpus": [], "components_ns": {"calls": 0}}}, "fallback": "h"},
     "components"),
])
def test_invalid_references_are_refused(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_references(document(**changes))


def test_shipped_references_cover_the_benchmark_and_the_lent_gpus() -> None:
    references = host_references.references()
    assert references.fallback == "h100-host"
    assert references.for_gpu("h100").name == "h100-host"
    assert references.for_gpu("h200").name == "h200-host"
    for host in references.hosts.values():
        assert set(host.components_ns) == set(COMPONENTS)
    assert host_references.host_cpu_choices() == ("h100-host", "h200-host", NATIVE)


def test_host_speed_for_a_setting() -> None:
    assert host_speed_for(None) is None
    assert host_speed_for(NATIVE) is None
    with pytest.raises(ValueError, match="unknown reference host 'nowhere'"):
        host_speed_for("nowhere")


# -- following the local speed -----------------------------------------------------------------

def scripted_measure(totals: list[int]) -> Any:
    """A measure function whose successive rounds take ``totals`` ns (one component)."""
    rounds: Iterator[int] = iter(totals)

    def measure(rounds_asked: int) -> Mapping[str, int]:
        assert rounds_asked == 1
        return {"calls": next(rounds)}

    return measure


def test_host_speed_uses_the_median_of_its_window_of_rounds() -> None:
    host = ReferenceHost("r", (), {"calls": 1_000}, "")
    speed = HostSpeed(host, window=3, measure_fn=scripted_measure([900, 5_000, 2_000, 2_100, 2_200]))
    assert speed.ratio() == SpeedRatio(1_000, 2_000)  # the cold 5_000 round is out-voted
    assert speed.remeasure() == SpeedRatio(1_000, 2_100)  # window 5_000, 2_000, 2_100
    assert speed.remeasure() == SpeedRatio(1_000, 2_100)  # window 2_000, 2_100, 2_200
    assert speed.ratio() == SpeedRatio(1_000, 2_100)


def test_measure_times_each_component_in_thread_cpu() -> None:
    measured = host_benchmark.measure(rounds=1, components=("bytecode", "objects"))
    assert set(measured) == {"bytecode", "objects"}
    assert all(ns > 0 for ns in measured.values())
    with pytest.raises(ValueError, match="rounds"):
        host_benchmark.measure(rounds=0)


def test_torch_component_dispatches_with_a_fresh_threads_keys() -> None:
    """What a clock inside an op's dispatch measures must be the top-level dispatch path."""
    torch = pytest.importorskip("torch")
    include, exclude = host_benchmark._default_dispatch_keys()
    assert str(include) == str(torch._C._dispatch_tls_local_include_set())
    assert str(exclude) == str(torch._C._dispatch_tls_local_exclude_set())
    assert host_benchmark.measure(1, ("torch_ops",))["torch_ops"] > 0


# -- the clock ---------------------------------------------------------------------------------

class NoExclusion:
    """An excluded-CPU account with nothing excluded."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def total_ns(self) -> int:
        return 0


class ScriptedScale:
    """A CpuScale whose remeasurements return ``later`` in turn, each spending ``cost_ns`` of
    the (fake) process CPU as the benchmark would; ``during`` runs while it measures."""

    def __init__(self, first: SpeedRatio, later: list[SpeedRatio], cpu: list[int],
                 cost_ns: int = 0, during: Callable[[], None] = lambda: None) -> None:
        self._ratio = first
        self._later = iter(later)
        self._cpu = cpu
        self._cost_ns = cost_ns
        self._during = during
        self.calls = 0

    def ratio(self) -> SpeedRatio:
        return self._ratio

    def remeasure(self) -> SpeedRatio:
        self.calls += 1
        self._cpu[0] += self._cost_ns
        self._during()
        self._ratio = next(self._later)
        return self._ratio


@pytest.fixture
def fake_cpu(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The clock's process CPU time, set by the test: ``fake_cpu[0]`` ns."""
    cpu = [1_000]
    monkeypatch.setattr(clock_module, "_process_time_ns", lambda: cpu[0])
    return cpu


def scaled_clock(scale: ScriptedScale, every_ns: int = 100) -> VirtualClock:
    return VirtualClock(epoch_ns=0, excluded_cpu=NoExclusion(), cpu_scale=scale,
                        remeasure_every_cpu_ns=every_ns)


def test_clock_scales_script_cpu_and_keeps_earlier_time_at_its_ratio(fake_cpu: list[int]) -> None:
    scale = ScriptedScale(SpeedRatio(1, 2), [SpeedRatio(3, 1), SpeedRatio(1, 1)], fake_cpu)
    clock = scaled_clock(scale)
    fake_cpu[0] += 80
    assert clock.now_ns() == 40  # 80 ns here are 40 on the reference host
    clock.charge(5)  # modelled costs are not scaled
    assert clock.now_ns() == 45
    fake_cpu[0] += 20  # 100 ns since the start: due, measured after this reading
    assert clock.now_ns() == 55
    assert scale.calls == 1
    assert clock.speed_ratio == SpeedRatio(3, 1)
    fake_cpu[0] += 10
    assert clock.now_ns() == 55 + 30  # only the new CPU time at the new ratio
    assert clock.now_ns() == 85  # not due again yet
    assert scale.calls == 1


def test_the_measurements_own_cpu_time_is_skipped(fake_cpu: list[int]) -> None:
    readings: list[int] = []
    scale = ScriptedScale(SpeedRatio(1, 1), [SpeedRatio(1, 1)], fake_cpu, cost_ns=5_000,
                          during=lambda: readings.append(clock.now_ns()))
    clock = scaled_clock(scale)
    fake_cpu[0] += 100
    assert clock.now_ns() == 100
    assert readings == [100]  # a reading while it measures (another thread's) stays put
    assert clock.now_ns() == 100
    fake_cpu[0] += 7
    assert clock.now_ns() == 107
    assert clock.cpu_split_ns() == (107, 5_000)  # reported as the simulator's


def test_scaled_clock_jumps_to_sync_replies_and_stays_monotonic(fake_cpu: list[int]) -> None:
    clock = scaled_clock(ScriptedScale(SpeedRatio(1, 4), [], fake_cpu), every_ns=10**9)
    fake_cpu[0] += 400
    assert clock.now_ns() == 100
    clock.advance_to(1_000)
    assert clock.now_ns() == 1_000
    fake_cpu[0] += 40
    assert clock.now_ns() == 1_010
    fake_cpu[0] -= 400  # a CPU reading that went backwards never moves the clock back
    assert clock.now_ns() == 1_010


def test_a_sync_reply_time_holds_after_a_correction_lowers_the_raw_reading(
        fake_cpu: list[int]) -> None:
    """A sync reply's time is a floor for the clock: when the CPU counted since the last reading
    already passed the reply's time (the jump has nothing to add) and the script's next segment
    correction lowers the raw reading below it, the clock still reads at least the reply's time,
    so no batch promises less than the coordinator counted from the reply."""
    clock = scaled_clock(ScriptedScale(SpeedRatio(1, 1), [], fake_cpu), every_ns=10**9)
    assert clock.now_ns() == 0
    fake_cpu[0] += 500  # counted, not read yet
    clock.advance_to(400)  # the reply: 400 <= 500, no jump
    clock.correct(-300)  # a robust estimate replaces part of the segment's reading
    assert clock.now_ns() >= 400


def test_only_the_clocks_own_thread_remeasures(fake_cpu: list[int]) -> None:
    scale = ScriptedScale(SpeedRatio(1, 1), [SpeedRatio(1, 2)], fake_cpu)
    clock = scaled_clock(scale, every_ns=10)
    fake_cpu[0] += 20
    other = threading.Thread(target=clock.now_ns)
    other.start()
    other.join()
    assert scale.calls == 0
    clock.now_ns()
    assert scale.calls == 1


def test_unscaled_and_reproducible_clocks_measure_nothing(fake_cpu: list[int]) -> None:
    clock = VirtualClock(epoch_ns=0, excluded_cpu=NoExclusion())
    fake_cpu[0] += 70
    assert clock.now_ns() == 70
    assert clock.speed_ratio == SpeedRatio(1, 1)
    with pytest.raises(ValueError, match="reproducible"):
        VirtualClock(op_cost_ns=5, cpu_scale=ScriptedScale(SpeedRatio(1, 1), [], fake_cpu))

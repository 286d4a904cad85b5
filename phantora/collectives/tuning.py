"""NCCL's cost model: predicted time = latency + size / bandwidth per algorithm and protocol.

A transcription of ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime`` (NVIDIA/nccl
``src/graph/tuning.cc``) and the channel choice of ``topoGetAlgoInfo`` (``src/enqueue.cc``):
NCCL uses it to *select* algorithm, protocol and channel count, and so do we. The time a
collective then takes comes from simulating its flow DAG, not from this formula; but the
DAG's per-hop delays are taken from the same latencies, so an uncongested small collective
costs what NCCL's model says.

All bandwidths are GB/s (1e9 bytes/s), latencies microseconds, as in NCCL's tables.

NB: where NCCL looks at the host CPU (LL bandwidth across nodes, network post overhead) we
assume x86 Intel hosts; the tree's balanced-vs-plain pattern penalty (x0.85) is not applied.
"""

from dataclasses import dataclass

from phantora.collectives.comm import Comm
from phantora.collectives.config import Algorithm, NcclConfig, Protocol
from phantora.collectives.request import CollectiveOp
from phantora.collectives.search import Graph, Graphs, arch_key, uses_pci_threads

_LL, _LL128, _SIMPLE = 0, 1, 2
_PROTO_INDEX = {Protocol.LL: _LL, Protocol.LL128: _LL128, Protocol.SIMPLE: _SIMPLE}

# Base latency per algorithm, (LL, LL128, Simple), us.
_BASE_LATENCY_US = {
    Algorithm.TREE: (6.8, 14.0, 8.4),
    Algorithm.RING: (6.6, 14.0, 8.4),
    Algorithm.NVLS: (0.0, 0.0, 0.0),
}
# Hardware latency per hop, (LL, LL128, Simple), us: over NVLink and over the network.
_NVLINK_LATENCY_US = {
    Algorithm.TREE: (0.6, 1.25, 4.0),
    Algorithm.RING: (0.6, 1.9, 3.4),
    Algorithm.NVLS: (0.0, 0.0, 25.0),
}
_NET_LATENCY_US = {
    Algorithm.TREE: (5.0, 8.5, 14.0),
    Algorithm.RING: (2.7, 4.0, 14.0),
    Algorithm.NVLS: (0.0, 0.0, 18.0),
}
_NET_OVERHEAD_US = 1.0
"""Network post overhead on Intel x86 hosts (``getNetOverhead``); x3 for Simple."""

# Per-generation rows are Volta(0), Ampere(80), Hopper(90), Blackwell(100); columns are
# (1 node, 2 nodes, 3+ nodes).
_LL_MAX_BW = {0: (39.0, 39.0, 20.4), 80: (87.7, 22.5, 19.0), 90: (141.0, 45.0, 35.0),
              100: (282.0, 90.0, 70.0)}
_PER_CH_RING_LL128_BW = {0: 20.0, 80: 20.0, 90: 36.7, 100: 40.0}
_PER_CH_TREE_LL128_BW = {0: (20.0, 20.0, 20.0), 80: (20.0, 20.0, 20.0), 90: (36.7, 36.7, 29.0),
                         100: (55.6, 31.67, 20.0)}
_PER_CH_TREE_BW = {0: (26.5, 18.5, 10.0), 80: (24.0, 23.6, 17.8), 90: (38.7, 41.4, 36.0),
                   100: (70.0, 42.8, 24.0)}
_NVLS_EFFICIENCY = {90: 0.85, 100: 0.74}

# Tree all-reduce bandwidth correction for sizes 64 B .. 256 MB (powers of two), per protocol.
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9),
)

# Threads per CTA (``NCCL_*_MAX_NTHREADS``) and bytes per thread before adding channels.
_MAX_THREADS = {Protocol.LL: 512, Protocol.LL128: 640, Protocol.SIMPLE: 512}
_THREAD_THRESHOLD = {Protocol.LL: 8, Protocol.LL128: 8, Protocol.SIMPLE: 64}

# Which algorithms NCCL's model considers for each op (PAT and CollNet are not modeled).
_ALGORITHMS = {
    CollectiveOp.ALL_REDUCE: (Algorithm.TREE, Algorithm.RING, Algorithm.NVLS),
    CollectiveOp.ALL_GATHER: (Algorithm.RING,),
    CollectiveOp.REDUCE_SCATTER: (Algorithm.RING,),
    CollectiveOp.BROADCAST: (Algorithm.RING,),
    CollectiveOp.REDUCE: (Algorithm.RING,),
}


@dataclass(frozen=True, slots=True)
class HopLatency:
    """NCCL's latency for one (op, algorithm, protocol), split the way a DAG charges it."""

    base_us: float
    """Charged once, before the first flows."""
    intra_us: float
    """Per NVLink hop on a chunk's path."""
    inter_us: float
    """Per network hop on a chunk's path."""


@dataclass(frozen=True, slots=True)
class Choice:
    """NCCL's pick for one collective and the model's prediction for it."""

    algorithm: Algorithm
    protocol: Protocol
    n_channels: int
    """CTAs the collective runs on (NCCL's ``nMaxChannels``)."""
    predicted_us: float
    """NCCL's own estimate (latency + size / bandwidth), for reports and checks."""


class TuningModel:
    """NCCL's latency and bandwidth tables for one communicator and its searched graphs."""

    def __init__(self, comm: Comm, graphs: Graphs) -> None:
        self.comm = comm
        self.graphs = graphs
        self._arch = arch_key(comm.system.gpu.sm_arch)
        nodes = comm.nnodes
        self._node_col = 0 if nodes == 1 else 1 if nodes == 2 else 2
        ll_row = self._arch if nodes == 1 else 0  # across nodes NCCL looks at the CPU type
        self._ll_max_bw = _LL_MAX_BW[ll_row][self._node_col]

    # -- NCCL's tables ------------------------------------------------------------------------
    def nsteps(self, op: CollectiveOp) -> int:
        n = self.comm.nranks
        if op is CollectiveOp.ALL_REDUCE:
            return 2 * (n - 1)
        if op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER):
            return n - 1
        return n

    def supports(self, op: CollectiveOp, algorithm: Algorithm) -> bool:
        if algorithm not in _ALGORITHMS.get(op, ()):
            return False
        return algorithm is not Algorithm.NVLS or self.graphs.nvls is not None

    def _graph(self, algorithm: Algorithm) -> Graph:
        if algorithm is Algorithm.NVLS:
            if self.graphs.nvls is None:
                raise ValueError("NVLS is not available on this communicator")
            return self.graphs.nvls
        return self.graphs.tree if algorithm is Algorithm.TREE else self.graphs.ring

    def bus_bandwidth(self, op: CollectiveOp, algorithm: Algorithm, protocol: Protocol) -> float:
        """NCCL's ``busBw`` before conversion to algorithm bandwidth; 0 when not supported."""
        if not self.supports(op, algorithm):
            return 0.0
        p = _PROTO_INDEX[protocol]
        graph = self._graph(algorithm)
        nch = graph.n_channels
        if algorithm is Algorithm.NVLS:
            if p != _SIMPLE or nch < 2:
                return 0.0
            intra = graph.bw_intra * _NVLS_EFFICIENCY.get(self._arch, 0.0) * (nch - 1) / nch
            ppn = self.comm.ppn
            intra *= 2.0 if op is CollectiveOp.ALL_REDUCE else (ppn - 1) / ppn
            bw = min(intra, graph.bw_inter)
        else:
            bw = graph.bw_intra if self.comm.nnodes <= 2 else graph.bw_inter
        bus = nch * bw
        col = self._node_col
        if algorithm is Algorithm.RING and p == _LL:
            bus = min(self._ll_max_bw, bus * 0.5)
        if algorithm is Algorithm.RING and p == _LL128:
            bus = min(bus * 0.92, nch * _PER_CH_RING_LL128_BW[self._arch])
        if algorithm is Algorithm.TREE and op is CollectiveOp.ALL_REDUCE:
            bus = min(bus * 0.92, nch * _PER_CH_TREE_BW[self._arch][col])
        if algorithm is Algorithm.TREE and p == _LL:
            bus = min(bus / 3.8, self._ll_max_bw)
        if algorithm is Algorithm.TREE and p == _LL128:
            factor = 7.0 / 9.0 if self.comm.nnodes == 1 else 120.0 / 128.0
            bus = min(bus * factor, nch * _PER_CH_TREE_LL128_BW[self._arch][col])
        return bus

    def bandwidth(self, op: CollectiveOp, algorithm: Algorithm, protocol: Protocol) -> float:
        """Algorithm bandwidth (bytes of the buffer per second), GB/s; 0 when not supported."""
        bus = self.bus_bandwidth(op, algorithm, protocol)
        if algorithm is not Algorithm.RING and op in (CollectiveOp.ALL_GATHER,
                                                      CollectiveOp.REDUCE_SCATTER):
            return bus
        if algorithm is Algorithm.TREE:
            return bus * 0.5
        return bus * self.comm.nranks / self.nsteps(op)

    def link_rate(self, op: CollectiveOp, algorithm: Algorithm, protocol: Protocol) -> float:
        """GB/s each GPU's busiest link carries in NCCL's model (``busBw``; NVLS: algbw x (n+1)/n).

        Ratios of these tell how fast one (algorithm, protocol) drives the same links as
        another, which is how :mod:`~phantora.collectives.efficiency` sets wire bytes.
        """
        if algorithm is Algorithm.NVLS:
            n = self.comm.local_ranks
            return self.bandwidth(op, algorithm, protocol) * (n + 1) / n
        return self.bus_bandwidth(op, algorithm, protocol)

    def relative_link_rate(self, op: CollectiveOp, algorithm: Algorithm,
                           protocol: Protocol) -> float:
        """How fast (algorithm, protocol) drives the links, per NCCL's model, relative to
        Simple on the same algorithm (whose link loads the flow DAG itself reproduces); NVLS
        relative to ring/Simple on the same NVLinks."""
        reference = Algorithm.RING if algorithm is Algorithm.NVLS else algorithm
        return (self.link_rate(op, algorithm, protocol)
                / self.link_rate(op, reference, Protocol.SIMPLE))

    def p2p_latency(self) -> HopLatency:
        """NB: NCCL models no p2p latency; a transfer is charged one ring/LL step (6.6 + 0.6
        us on NVLink), close to 2xH200 all_to_all at 64 KiB (7.9 us), whatever the protocol."""
        ring = Algorithm.RING
        return HopLatency(_BASE_LATENCY_US[ring][_LL], _NVLINK_LATENCY_US[ring][_LL],
                          _NET_LATENCY_US[ring][_LL])

    def _inter_hop_us(self, algorithm: Algorithm, p: int) -> float:
        # With one rank per node the latencies are fully exposed: NCCL uses the tree's.
        table = Algorithm.TREE if self.comm.ppn == 1 else algorithm
        return _NET_LATENCY_US[table][p]

    def latency(self, op: CollectiveOp, algorithm: Algorithm, protocol: Protocol) -> float:
        """NCCL's latency (us) for the whole collective."""
        hops = self.hop_latency(op, algorithm, protocol)
        comm = self.comm
        if algorithm is Algorithm.NVLS:
            return hops.base_us
        if algorithm is Algorithm.TREE:
            depth_intra = comm.nranks // comm.nnodes - 1
            return hops.base_us + 2 * (depth_intra * hops.intra_us
                                       + _log2i(comm.nnodes) * hops.inter_us)
        if op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
            return hops.base_us + (comm.nranks - 1) * hops.intra_us
        inter_steps = self.inter_steps(op)
        return (hops.base_us + (self.nsteps(op) - inter_steps) * hops.intra_us
                + inter_steps * hops.inter_us)

    def inter_steps(self, op: CollectiveOp) -> int:
        """Network hops on a ring chunk's path (NCCL's ``nInterSteps``)."""
        nodes = self.comm.nnodes
        if nodes == 1:
            return 0
        return 2 * (nodes - 1) if op is CollectiveOp.ALL_REDUCE else nodes - 1

    def hop_latency(self, op: CollectiveOp, algorithm: Algorithm,
                    protocol: Protocol) -> HopLatency:
        """The latency terms of ``ncclTopoTuneModel``, per hop of the DAG that runs the op."""
        p = _PROTO_INDEX[protocol]
        multi = self.comm.nnodes > 1
        intra = _NVLINK_LATENCY_US[algorithm][p]
        inter = self._inter_hop_us(algorithm, p)
        if algorithm is Algorithm.NVLS:
            return HopLatency(intra + (inter if multi else 0.0), 0.0, 0.0)
        base = _BASE_LATENCY_US[algorithm][p]
        if algorithm is Algorithm.RING and op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
            # NCCL charges one hop for the whole pipelined chain; spread it over the chain.
            hop = (inter if multi else intra) / max(1, self.comm.nranks - 1)
            return HopLatency(base, hop, hop)
        if algorithm is Algorithm.RING and multi:
            intra = max(intra, _NET_OVERHEAD_US * (3.0 if p == _SIMPLE else 1.0))
        return HopLatency(base, intra, inter)

    def latency_factor(self, op: CollectiveOp, algorithm: Algorithm, protocol: Protocol,
                       nbytes: int) -> float:
        """The multi-node ring/Simple all-reduce "plateau" factor NCCL applies to latency."""
        comm = self.comm
        if (algorithm is Algorithm.RING and protocol is Protocol.SIMPLE and comm.nnodes > 1
                and op is CollectiveOp.ALL_REDUCE
                and nbytes // (self.graphs.coll_channels * comm.nranks) >= 64):
            return 1.9 if self._arch < 80 else 1.4
        return 1.0

    def predicted_us(self, op: CollectiveOp, algorithm: Algorithm, protocol: Protocol,
                     nbytes: int) -> float | None:
        """``ncclTopoGetAlgoTime``; ``None`` when the pair is unavailable."""
        bw = self.bandwidth(op, algorithm, protocol)
        if bw <= 0:
            return None
        log_size = _log2i(nbytes >> 6)
        if algorithm is Algorithm.TREE and op is CollectiveOp.ALL_REDUCE and 0 <= log_size < 23:
            bw *= _TREE_CORRECTION[_PROTO_INDEX[protocol]][log_size]
        lat = self.latency(op, algorithm, protocol) * self.latency_factor(op, algorithm,
                                                                          protocol, nbytes)
        return lat + nbytes / (1000.0 * bw)

    # -- selection ------------------------------------------------------------------------------
    def select(self, op: CollectiveOp, nbytes: int, config: NcclConfig) -> Choice:
        """The fastest allowed (algorithm, protocol) by NCCL's model, then its channel count."""
        best: tuple[float, Algorithm, Protocol] | None = None
        for algorithm in Algorithm:
            if not self.supports(op, algorithm):
                continue
            for protocol in Protocol:
                if not config.allows(algorithm, protocol) or not self._enabled(protocol):
                    continue
                time = self.predicted_us(op, algorithm, protocol, nbytes)
                if time is not None and (best is None or time < best[0]):
                    best = (time, algorithm, protocol)
        if best is None:
            allowed = [a.value for a in _ALGORITHMS.get(op, ()) if self.supports(op, a)]
            raise ValueError(
                f"no algorithm/protocol available for {op.value} on {self.comm.nranks} GPUs "
                f"with NCCL_ALGO={_names(config.algorithms)} NCCL_PROTO="
                f"{_names(config.protocols)}; this op can use: {', '.join(allowed) or 'none'}")
        time, algorithm, protocol = best
        return Choice(algorithm, protocol, self.channels(algorithm, protocol, nbytes), time)

    def _enabled(self, protocol: Protocol) -> bool:
        # LL128 is on by default only where NCCL trusts it (SM70+ on our NVLink/NIC systems).
        return protocol is not Protocol.LL128 or self.comm.system.gpu.sm_arch >= 70

    def channels(self, algorithm: Algorithm, protocol: Protocol, nbytes: int) -> int:
        """``topoGetAlgoInfo``: drop channels while each would get too little data."""
        if algorithm is Algorithm.NVLS:
            return self.graphs.nvls_channels
        nc = self.graphs.coll_channels
        threads = _MAX_THREADS[protocol]
        if algorithm is Algorithm.RING and protocol is Protocol.SIMPLE and uses_pci_threads(
                self.graphs):
            threads = 256
        threshold = _THREAD_THRESHOLD[protocol]
        if algorithm is Algorithm.RING and protocol is Protocol.LL:
            threshold *= self.comm.nranks
        while nbytes < nc * threads * threshold and nc >= 2:
            nc -= 1
        return nc


def _log2i(n: int) -> int:
    """NCCL's ``log2i``: floor of log2, -1 for n <= 0."""
    return n.bit_length() - 1


def _names(values: frozenset[Algorithm] | frozenset[Protocol] | None) -> str:
    return "(unset)" if values is None else ",".join(sorted(v.value for v in values))

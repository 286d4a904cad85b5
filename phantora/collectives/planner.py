"""``plan_collective``: one collective request -> the flow DAG NCCL would run for it.

Steps, as NCCL takes them: see the group as a communicator (nodes, local ranks), search its
ring/tree/NVLS graphs, let the tuning model pick algorithm, protocol and channel count (with
the user's overrides), then lay the chosen algorithm out as flows.
"""

from phantora.cluster.topology import LinkKind
from phantora.collectives.efficiency import DEFAULT_NCCL_EFFICIENCY, NcclEfficiency
from phantora.collectives.chunking import nvls_chunk_bytes, step_chunk_bytes
from phantora.collectives.comm import Comm
from phantora.collectives.config import Algorithm, NcclConfig, Protocol
from phantora.collectives.dag import FlowDag
from phantora.collectives.nvls import nvls_all_reduce
from phantora.collectives.p2p import nvlink_sharing, p2p_transfers, pair_bytes
from phantora.collectives.request import CollectiveOp, CollectiveRequest
from phantora.collectives.ring import ring_chain, ring_collective
from phantora.collectives.search import search_graphs
from phantora.collectives.system import SystemInfo
from phantora.collectives.tree import tree_all_reduce
from phantora.collectives.tuning import Choice, HopLatency, TuningModel
from phantora.collectives.writer import FlowWriter

_P2P_OPS = (CollectiveOp.ALL_TO_ALL, CollectiveOp.ALL_TO_ALLV, CollectiveOp.SEND_RECV)
_NCCL_DEFAULTS = NcclConfig()


def plan_collective(request: CollectiveRequest, system: SystemInfo,
                    config: NcclConfig = _NCCL_DEFAULTS, *,
                    nccl_efficiency: NcclEfficiency = DEFAULT_NCCL_EFFICIENCY) -> FlowDag:
    """The flows (with dependencies and protocol delays) that run ``request`` on ``system``.

    A group of one GPU, or a collective of zero bytes, is an empty DAG (NCCL returns at once).
    Raises ``ValueError`` when the request or the overrides cannot be satisfied.
    """
    request.validate()
    comm = Comm.of(system, request.ranks)
    empty = request.nbytes == 0 and request.op is not CollectiveOp.ALL_TO_ALLV
    if comm.nranks == 1 or empty:
        return FlowDag(algorithm="none")
    model = TuningModel(comm, search_graphs(comm, config))
    if request.op in _P2P_OPS:
        return _plan_p2p(request, comm, model, config, nccl_efficiency)
    choice = model.select(request.op, request.nbytes, config)
    writer = _writer(comm, model, nccl_efficiency, request.op, choice, request.nbytes)
    _lay_out(writer, comm, model, request, choice, config)
    dag = writer.dag
    dag.algorithm, dag.protocol, dag.channels = (choice.algorithm.value, choice.protocol.value,
                                                 choice.n_channels)
    return dag


def select(request: CollectiveRequest, system: SystemInfo,
           config: NcclConfig = _NCCL_DEFAULTS) -> Choice:
    """NCCL's choice for a (non-p2p) collective, without laying it out."""
    request.validate()
    comm = Comm.of(system, request.ranks)
    return TuningModel(comm, search_graphs(comm, config)).select(request.op, request.nbytes,
                                                                 config)


def send_duty(op: CollectiveOp, algorithm: Algorithm, nranks: int) -> float:
    """Fraction of a channel's steps per loop that send over the network (the rest only
    copy out of the FIFO), from the primitive sequence of each ring loop (all_reduce.h...).

    Ring all_reduce: send, n-2 x recvReduceSend, recvReduceCopySend, n-2 x recvCopySend,
    recv: 2(n-1) sends in 2n-1 steps. all_gather / reduce_scatter: n-1 sends in n steps.
    Chains and trees forward as they receive (trees on separate warps per direction).
    """
    if algorithm is Algorithm.RING and op is CollectiveOp.ALL_REDUCE:
        return 2 * (nranks - 1) / (2 * nranks - 1)
    if algorithm is Algorithm.RING and op in (CollectiveOp.ALL_GATHER,
                                              CollectiveOp.REDUCE_SCATTER):
        return (nranks - 1) / nranks
    return 1.0


def _writer(comm: Comm, model: TuningModel, nccl_efficiency: NcclEfficiency, op: CollectiveOp,
            choice: Choice, nbytes: int) -> FlowWriter:
    algorithm, protocol = choice.algorithm, choice.protocol
    ratio = model.relative_link_rate(op, algorithm, protocol)
    if algorithm is Algorithm.NVLS:
        # NVLS moves data with multimem loads/stores, not CTA copies: no CTA limit.
        channels = 0
        chunk = nvls_chunk_bytes(nbytes, choice.n_channels, comm.nranks)
    else:
        channels, chunk = choice.n_channels, 0
    line_gbs = comm.system.nvlink_gbps / 8.0
    efficiency = {kind: nccl_efficiency.efficiency(
        kind, algorithm, protocol, model_ratio=ratio, line_gbs=line_gbs, channels=channels,
        send_duty=send_duty(op, algorithm, comm.nranks), chunk_bytes=chunk)
        for kind in LinkKind}
    hops = model.hop_latency(op, algorithm, protocol)
    factor = (model.latency_factor(op, algorithm, protocol, nbytes)
              * nccl_efficiency.latency_factor(algorithm, protocol))
    latency = HopLatency(hops.base_us * factor, hops.intra_us * factor, hops.inter_us * factor)
    return FlowWriter(comm.system, nccl_efficiency, efficiency, latency)


def _lay_out(writer: FlowWriter, comm: Comm, model: TuningModel, request: CollectiveRequest,
             choice: Choice, config: NcclConfig) -> None:
    op, nbytes, dtype = request.op, request.nbytes, request.dtype_bytes
    budget = config.flow_budget
    graphs = model.graphs
    if choice.algorithm is Algorithm.NVLS:
        nvls_all_reduce(writer, comm, nbytes)
    elif choice.algorithm is Algorithm.TREE:
        chunk = step_chunk_bytes(Algorithm.TREE, choice.protocol, nbytes, choice.n_channels,
                                 comm.nnodes, comm.ppn)
        tree_all_reduce(writer, comm, nbytes, dtype, choice.n_channels,
                        graphs.tree.n_channels, chunk, budget)
    elif op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
        chunk = step_chunk_bytes(Algorithm.RING, choice.protocol, nbytes, choice.n_channels,
                                 comm.nnodes, comm.ppn)
        ring_chain(writer, comm, op, nbytes, dtype, request.root, choice.n_channels,
                   graphs.ring.n_channels, chunk, budget)
    else:
        ring_collective(writer, comm, op, nbytes, dtype, choice.n_channels,
                        graphs.ring.n_channels, budget,
                        stepwise=comm.nranks <= config.stepwise_ring_ranks)


def _plan_p2p(request: CollectiveRequest, comm: Comm, model: TuningModel, config: NcclConfig,
              nccl_efficiency: NcclEfficiency) -> FlowDag:
    """send_recv and all_to_all(v): direct transfers, LL or Simple each by its size."""
    dag = FlowDag(algorithm="p2p", channels=model.graphs.coll_channels)
    grouped = request.op is not CollectiveOp.SEND_RECV
    duty = nccl_efficiency.grouped_p2p_duty if grouped else 1.0
    if not grouped:
        src, dst = request.ranks
        transfers = [(src, dst, request.nbytes)]
    else:
        transfers = pair_bytes(request.ranks, request.nbytes, request.splits,
                               request.dtype_bytes)
    # A transfer's CTAs cap its own rate, not the link's: where k transfers leave one GPU over
    # NVLink together, each has a k-th of the link, and its channels cap that share.
    line_gbs = comm.system.nvlink_gbps / 8.0 / nvlink_sharing(comm.system, transfers)
    writers: dict[tuple[Protocol, int], FlowWriter] = {}

    def writer_for(protocol: Protocol, channels: int) -> FlowWriter:
        """Transfers striped over ``channels`` CTAs; LL pays its line format (half flags)."""
        key = (protocol, channels)
        if key not in writers:
            ratio = 0.5 if protocol is Protocol.LL else 1.0  # NB: NCCL models no p2p bandwidth
            efficiency = {kind: nccl_efficiency.efficiency(
                kind, Algorithm.RING, protocol, model_ratio=ratio, line_gbs=line_gbs,
                channels=channels, send_duty=duty) for kind in LinkKind}
            writers[key] = FlowWriter(comm.system, nccl_efficiency, efficiency,
                                      model.p2p_latency(), dag)
        return writers[key]

    dag.protocol = p2p_transfers(writer_for, comm, model.graphs, transfers,
                                 config.flow_budget).value
    return dag

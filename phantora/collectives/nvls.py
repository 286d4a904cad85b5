"""NVLS all-reduce on one host (NVLink SHARP, ``src/device/all_reduce.h`` NVLS path).

Each GPU owns ``1/n`` of the buffer. It reads its part from all GPUs through the NVSwitch,
which reduces in flight (``multimem.ld_reduce``), and writes the result once to a multicast
address, which the switch copies to every GPU. Per GPU and direction the NVLink carries
``S`` (its whole buffer, read by the owners) + ``S/n`` (its reduced part): ``S (n+1)/n``,
against ``2 S (n-1)/n`` for a ring.

NB: our topology has no in-switch reduction, so the same link load is produced with plain
GPU-to-GPU flows: every GPU sends ``S (n+1) / (n (n-1))`` to every other GPU, which loads
each NVLink up and down by exactly ``S (n+1)/n``. The reduce and multicast phases are
pipelined in NCCL and are one round of flows here, charged NCCL's NVLS latency once.
"""

from phantora.collectives.chunking import split_even
from phantora.collectives.comm import Comm
from phantora.collectives.writer import FlowWriter


def nvls_all_reduce(writer: FlowWriter, comm: Comm, nbytes: int) -> None:
    """One flow per ordered GPU pair carrying that pair's share of the NVLS link load."""
    n = comm.nranks
    # Each GPU sends nbytes * (n+1)/n in total, spread over its n-1 peers.
    shares = split_even(nbytes * (n + 1) // n, n - 1)
    for i, src in enumerate(comm.ranks):
        peers = [dst for dst in comm.ranks if dst != src]
        for j, dst in enumerate(peers):
            # Rotating the remainder bytes loads the receivers evenly as well.
            writer.send(src, dst, shares[(i + j) % (n - 1)], tag=0)

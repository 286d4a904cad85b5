"""Tree all-reduce (``runTreeSplit`` in ``src/device/all_reduce.h``; trees from
``src/graph/trees.cc`` and ``connect.cc``).

Across hosts NCCL builds a *double binary tree* over the nodes: tree 0 is a binary tree,
tree 1 its mirror (or a shift, for an odd node count), so every node is a leaf in one of
them. Half of the channels run tree 0, half tree 1. Inside a host each channel is a chain
starting at the GPU whose NIC connects it to the parent and child nodes.

Every chunk is reduced up the tree (children to parent) and broadcast back down; both
directions run at once on separate warps, chunk after chunk, with ``NCCL_STEPS`` slots of
buffering per connection.

NB: NCCL's balanced tree puts one child node on the chain's second GPU; here all of a
node's network traffic goes through the chain's first GPU (NCCL's plain ``TREE`` pattern).
"""

from dataclasses import dataclass

from phantora.collectives.chunking import plan_pipeline, split_even
from phantora.collectives.comm import Comm
from phantora.collectives.writer import FlowWriter
from phantora.network.base import GpuId


def btree(nranks: int, rank: int) -> tuple[int, list[int]]:
    """NCCL's binary tree over ``nranks`` (rooted at 0): ``(parent or -1, children)``."""
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if nranks > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    low = bit >> 1
    children = []
    if low:
        children.append(rank - low)
        down1 = rank + low
        while down1 >= nranks and low:
            low >>= 1
            down1 = rank + low
        if low:
            children.append(down1)
    return up, children


def dtree(nranks: int, rank: int, which: int) -> tuple[int, list[int]]:
    """Tree ``which`` (0 or 1) of NCCL's double binary tree: the btree, or its mirror/shift."""
    if which == 0:
        return btree(nranks, rank)
    if nranks % 2:
        up, children = btree(nranks, (rank - 1) % nranks)
        return (-1 if up == -1 else (up + 1) % nranks), [(c + 1) % nranks for c in children]
    up, children = btree(nranks, nranks - 1 - rank)
    return (-1 if up == -1 else nranks - 1 - up), [nranks - 1 - c for c in children]


@dataclass(frozen=True, slots=True)
class Tree:
    """One distinct channel tree over GPUs and the channels that run it."""

    parent: dict[GpuId, GpuId]
    children: dict[GpuId, list[GpuId]]
    root: GpuId
    channels: tuple[int, ...]
    tag: int

    def preorder(self) -> list[GpuId]:
        order, stack = [], [self.root]
        while stack:
            gpu = stack.pop()
            order.append(gpu)
            stack.extend(reversed(self.children[gpu]))
        return order


def build_trees(comm: Comm, n_channels: int, n_search: int) -> list[Tree]:
    """Channel ``c`` runs tree ``(c // n_search) % 2``; chains start at rail ``c % n_search``."""
    layouts: dict[tuple[int, int], list[int]] = {}
    for channel in range(n_channels):
        search = channel % n_search
        key = ((channel // n_search) % 2, search % comm.local_ranks)
        layouts.setdefault(key, []).append(channel)
    trees = []
    for tag, ((which, entry), channels) in enumerate(layouts.items()):
        parent: dict[GpuId, GpuId] = {}
        children: dict[GpuId, list[GpuId]] = {gpu: [] for gpu in comm.ranks}
        heads = []
        for node in comm.nodes:
            start = entry % len(node)
            chain = node[start:] + node[:start]
            heads.append(chain[0])
            for up, down in zip(chain, chain[1:], strict=False):
                parent[down] = up
                children[up].append(down)
        root = -1
        for index, head in enumerate(heads):
            up, _ = dtree(comm.nnodes, index, which)
            if up == -1:
                root = head
            else:
                parent[head] = heads[up]
                children[heads[up]].append(head)
        trees.append(Tree(parent, children, root, tuple(channels), tag))
    return trees


def tree_all_reduce(writer: FlowWriter, comm: Comm, nbytes: int, dtype_bytes: int,
                    n_channels: int, n_search: int, chunk_bytes: int, budget: int) -> None:
    """Reduce every piece up each tree, then broadcast it down, pieces pipelined."""
    trees = build_trees(comm, n_channels, n_search)
    channel_bytes = [e * dtype_bytes for e in split_even(nbytes // dtype_bytes, n_channels)]
    flows_per_piece = 2 * (comm.nranks - 1) * len(trees)
    pipeline = plan_pipeline(max(channel_bytes), chunk_bytes, max(1, budget // flows_per_piece))
    for tree in trees:
        pieces = [0] * pipeline.pieces
        for channel in tree.channels:
            for k, size in enumerate(split_even(channel_bytes[channel], pipeline.pieces)):
                pieces[k] += size
        _emit_tree(writer, tree, pieces, pipeline.window)


def _emit_tree(writer: FlowWriter, tree: Tree, pieces: list[int], window: int) -> None:
    """Up: a GPU sends piece k to its parent once its children's piece k arrived and the
    parent forwarded piece k-window. Down: the root sends piece k once all of it is reduced,
    others forward it once received (and once the child freed a slot)."""
    pre = tree.preorder()
    post = pre[::-1]
    up: dict[GpuId, list[int]] = {gpu: [] for gpu in pre if gpu != tree.root}
    down: dict[GpuId, list[int]] = {gpu: [] for gpu in pre if gpu != tree.root}
    for k, payload in enumerate(pieces):
        for gpu in post:
            if gpu == tree.root:
                continue
            parent = tree.parent[gpu]
            deps = [up[child][k] for child in tree.children[gpu]]
            if parent != tree.root and k >= window:
                deps.append(up[parent][k - window])
            # Piece k (payload bytes, partial sum) from gpu to its parent.
            up[gpu].append(writer.send(gpu, parent, payload, tree.tag, deps))
        for gpu in pre:
            if gpu == tree.root:
                have = [up[child][k] for child in tree.children[gpu]]
            else:
                have = [down[gpu][k]]
            for child in tree.children[gpu]:
                deps = list(have)
                if k >= window:
                    deps += [down[grandchild][k - window] for grandchild in tree.children[child]]
                # Piece k (payload bytes, final values) from gpu to child.
                down[child].append(writer.send(gpu, child, payload, tree.tag, deps))

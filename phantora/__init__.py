"""phantora-ns3: a hybrid simulator of distributed PyTorch training on GPU clusters.

Vocabulary (used the same way everywhere in the code):

* **rank** - one live process of the user's training script (one per simulated GPU).
* **GPU** - a network endpoint, numbered globally ``gpu = host * gpus_per_host + local``.
* **host** - one server: its GPUs talk over NVLink/NVSwitch inside, over their NICs outside.
* **flow** - a number of bytes sent from one GPU to another; the unit the network simulates.
* **collective** - one operation (all_reduce, ...) on a group of ranks, matched across ranks
  by ``(group, seq)`` and decomposed into a DAG of flows the way NCCL runs it.

Units: time is ``int`` nanoseconds (``*_ns``), sizes ``int`` bytes (``*_bytes``),
rates are gigabits per second (``*_gbps``) unless the name says ``*_gbs`` (gigabytes per second,
as nccl-tests reports bandwidth).
"""

__version__ = "0.1.0"

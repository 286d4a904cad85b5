"""``torch.distributed`` on simulated GPUs: the ``phantora`` process-group backend.

:mod:`.process_group` sends every collective and point-to-point op the script issues to the
coordinator as a :class:`wire.ops.IssuedOp`, and the real values the collectives carry beside
them; their times come from the coordinator's NCCL and network models, never from here.
"""

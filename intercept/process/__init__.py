"""A live rank's process: how it starts and how it talks to the coordinator.

The fork server (:mod:`.fork_server`, started by ``launch.launcher`` by its module path) loads
the fake-CUDA shim (:mod:`.shim`, built from ``native/fakecuda.cpp`` against the installed
torch), prepares the fake device once and forks each rank; a rank (:mod:`.rank_main`) sets up
torchrun's environment, runs the user's program and reports through its coordinator connection
(:mod:`.client`: batches of :mod:`wire` messages). Nothing here is measured: its inputs are the
:class:`~launch.spec.LaunchSpec` the coordinator sends.
"""

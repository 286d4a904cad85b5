"""The models both sides share: the simulated hardware and what its work costs.

Its contract: the coordinator (``phantora``) and the rank side (``intercept``) both import it,
and it imports neither of them, nor ``launch`` or ``wire``, nor PyTorch or ns-3; so the two
sides never need to import each other (``pyproject.toml``'s import contracts).

* :mod:`.errors` - every error phantora raises on purpose, as one tree.
* :mod:`.units` - parsing of sizes, rates and durations written with units.
* :mod:`.measured` - every measured value, each with its source, and the measured tables.
* :mod:`.catalogue` - the GPU models a cluster can hold.
* :mod:`.compute` - the kernel-time model: how long a GPU kernel runs on the scenario's GPU.

Each layer imports only those listed before it, the compute model last.
"""

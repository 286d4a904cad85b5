"""Execution graphs of live runs: recorded as they run, replayed without the script.

:mod:`.graph` is the on-disk format (versioned, documented in ``docs/execution-graph.md``),
:mod:`.script_runner` runs a training-script scenario live, :mod:`.recorder` taps its rank
connections, :mod:`.replay` drives the live engine from a recording on another cluster or
network.
"""

"""Execution graphs of live runs: recorded as they run, replayed without the script.

:mod:`.graph` is the on-disk format (versioned, documented in ``docs/execution-graph.md``),
:mod:`.recorder` taps a live run's rank connections (the live run: :mod:`phantora.run.live`),
:mod:`.replay` drives the live engine from a recording on another cluster or network.
"""

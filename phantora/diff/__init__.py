"""``phantora-ns3 diff``: real per-rank GPU traces against a simulated run of the same script.

:mod:`.simulated` reads the run folder (trace, execution graph, step attribution) into GPU
activities per live rank; :mod:`.compare` aligns each profiled step with a simulated one and
measures both alike (``docs/diff.md``); :mod:`.table` prints the result. The real side is read
by :mod:`phantora.profiles`.
"""

"""Topology studies and static-trace comparison: sweeps over scenario keys (replays where only
the network changes), result tables and plots, and Chakra / AICB exports of recorded runs."""

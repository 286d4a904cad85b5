"""Counters of a simulated part scaled to the whole it stands for (rail and host mirroring)."""

SCALED_COUNTERS = frozenset({
    "data_packets", "ack_packets", "packet_hops", "drops", "ecn_marks", "pfc_pause_frames",
    "pfc_paused_ports", "pfc_paused_us_total", "queue_pairs_with_cnp",
    "queue_pairs_rate_cut", "cnps", "rate_cuts", "retransmissions", "drained_packets",
    "reordered_packets", "link_down_drops",
})
"""Counters of the ns-3 backend that add up over the parts of a fabric; maxima, minima and
costs are not scaled."""


def scaled(extra: dict[str, int | float | str], factor: float) -> dict[str, int | float | str]:
    """``extra`` with every additive counter times ``factor`` (integers stay integers), and
    ``packet_hops_simulated``: the hops ns-3 simulated, what its speed is measured by."""
    out = {key: (round(value * factor, 3) if isinstance(value, float) else round(value * factor))
           if key in SCALED_COUNTERS and isinstance(value, int | float) else value
           for key, value in extra.items()}
    if "packet_hops" in extra:
        out.setdefault("packet_hops_simulated", extra["packet_hops"])
    return out

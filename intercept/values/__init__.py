"""Which values are real: the tensors that steer control flow and what the host reads of them.

Integer, bool, small and CPU tensors keep real values beside their fake counterparts
(:mod:`.store`); integers derived from fake floats (router top-k, comparisons) come from the
scenario's seeded value model (:mod:`.value_model`, with the routing of
``launch.value_policy``: uniform, balanced, zipf, or expert counts recorded from a real run);
what the host reads of a value nobody knows is a plausible stand-in (:mod:`.plausible`), read
through the active mode by printing, ``tolist`` and pickling (:mod:`.host_reads`).
"""

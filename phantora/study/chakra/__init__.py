"""Chakra execution traces (ASTRA-sim's input): the vendored schema (``et_def.proto``, its
generated ``et_def_pb2``) and the exporter of recorded runs (:mod:`.export`)."""

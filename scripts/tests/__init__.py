"""Tests of the scripts (parsers, fits, harnesses, doc outputs): they go with the scripts they
test. The product's tests, ``tests/``, import no script (``tests/unit/test_layering.py``)."""

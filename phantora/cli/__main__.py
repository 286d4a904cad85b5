"""``python -m phantora.cli SCENARIO.yaml ...``: the same as ``phantora-ns3``."""

import sys

from phantora.cli import main

sys.exit(main())

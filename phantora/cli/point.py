"""One sweep point in its own process: ``python -m phantora.cli.point POINT.json``.

A process per point keeps points apart (ns-3's global state, a crashing rank) so that one
failure is one failed row; the sweep reads the point's ``summary.json``. ``POINT.json`` holds
``{data, source, out, replay_of}``: the point's scenario as YAML data, the scenario file it
came from (relative paths in it resolve from there), the output folder and, for a replay, the
recorded run.
"""

import json
import sys
from pathlib import Path

from rich.console import Console

from hwmodel.errors import PhantoraError
from phantora.cli import report_error, simulate
from phantora.scenario import parse_scenario


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    console = Console(width=120, soft_wrap=True)  # an error stays on one line
    try:
        scenario = parse_scenario(spec["data"], spec["source"])
    except PhantoraError as error:
        return report_error(error, console)
    replay_of = spec.get("replay_of")
    return simulate(scenario, Path(spec["out"]), console,
                    replay_of=Path(replay_of) if replay_of else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

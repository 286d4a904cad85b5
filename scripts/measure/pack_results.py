"""Pack a measuring session's files into a few tar files that fit what the lent GPU machine
may send back (a handful of files, each under a size limit).

Files go in whole, largest folders last; a file that would overflow every tar is left out and
named in ``left_out.txt`` beside the tars, so that nothing goes missing silently.

  python3 scripts/measure/pack_results.py /tmp/traces --out "$OUT" --name traces --max-files 6
"""

from __future__ import annotations

import argparse
import tarfile
from pathlib import Path


def pack(root: Path, out: Path, name: str, max_files: int, max_bytes: int) -> list[Path]:
    """Tar every file under ``root`` (paths relative to its parent) into at most ``max_files``
    tars of at most ``max_bytes`` each; return the files left out."""
    files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: (p.parent, p.name))
    bins: list[list[Path]] = [[] for _ in range(max_files)]
    sizes = [0] * max_files
    left_out: list[Path] = []
    for path in files:
        size = path.stat().st_size + 1024  # the tar header and padding
        target = next((i for i in range(max_files) if sizes[i] + size <= max_bytes), None)
        if target is None:
            left_out.append(path)
            continue
        bins[target].append(path)
        sizes[target] += size
    for index, members in enumerate(bins):
        if members:
            with tarfile.open(out / f"{name}{index}.tar", "w") as tar:
                for path in members:
                    tar.add(path, arcname=str(path.relative_to(root.parent)))
    return left_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", default="files")
    parser.add_argument("--max-files", type=int, default=6)
    parser.add_argument("--max-mb", type=float, default=15.5)
    args = parser.parse_args()
    left_out = pack(args.root, args.out, args.name, args.max_files, int(args.max_mb * 2**20))
    (args.out / f"{args.name}_left_out.txt").write_text("".join(f"{p}\n" for p in left_out))
    print(f"{args.name}: {len(left_out)} files left out")


if __name__ == "__main__":
    main()

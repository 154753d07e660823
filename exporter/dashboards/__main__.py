"""``python -m exporter.dashboards [--out DIR] [--check]``: write (or check) the committed dashboard JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.dashboards import render

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "grafana" / "dashboards"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exporter.dashboards", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print("stale (run python -m exporter.dashboards): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

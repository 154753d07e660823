"""``python -m bottleneck_exporter.dashboards [--root DIR] [--check]``: write (or check) every bundle's JSON and the
monitoring mixin's copies (mixin/dashboards/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bottleneck_exporter.dashboards.files import REGENERATE, render_all, render_mixin

DEFAULT_ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bottleneck_exporter.dashboards", description=__doc__)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help="repository root, holding grafana/dashboards/ and grafana/bundles/")
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs")
    args = parser.parse_args(argv)
    stale = []
    dashboards = render_all()
    for relative, text in {**dashboards, **render_mixin(dashboards)}.items():
        path = args.root / relative
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print(f"stale (run {REGENERATE}): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

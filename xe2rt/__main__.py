"""python -m xe2rt info | bench"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xe2rt")
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="devices, chosen target, shipped binaries and their AOT report")
    p_info.add_argument("--device", help="SYCL filter string, e.g. opencl:cpu")
    p_info.add_argument("--json", action="store_true", help="print JSON")
    from .bench.cli import add_arguments
    add_arguments(sub.add_parser("bench", help="benchmark every kernel family against the device's bandwidth"))
    args = parser.parse_args(argv)

    import xe2rt
    if args.command == "info":
        from .info import format_info
        data = xe2rt.info(args.device)
        print(json.dumps(data, indent=1) if args.json else format_info(data))
        return 0
    from .bench.cli import run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

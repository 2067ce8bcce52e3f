"""python -m xe2rt COMMAND: one subcommand per module of xe2rt.cli's COMMANDS (each has add_arguments and run)."""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module with `add_arguments(parser)` and `run(args) -> int`, one-line help)
COMMANDS = {
    "info": ("xe2rt.info", "devices, chosen target, shipped binaries and their AOT report"),
    "bench": ("xe2rt.bench.cli", "benchmark every kernel family against the device's bandwidth"),
    "generate": ("xe2rt.models.cli", "generate text with a Hugging Face decoder folder (Llama, Qwen3, Qwen3-MoE)"),
    "build": ("xe2rt.build.cli", "build OpenCL C (or a spec .toml) into per-target SPIR-V with a manifest"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xe2rt")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        importlib.import_module(module).add_arguments(sub.add_parser(name, help=help_text))
    args = parser.parse_args(argv)
    return importlib.import_module(COMMANDS[args.command][0]).run(args)


if __name__ == "__main__":
    sys.exit(main())

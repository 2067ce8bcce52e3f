"""python -m xe2rt COMMAND: one subcommand per module of the COMMANDS table (each has add_arguments and run).

A user's mistake (a bad XE2RT_* variable, a device filter that matches nothing, a missing file or model, a wrong
argument to an op) is reported here once for every subcommand: one line on stderr, exit status 2, no traceback;
`--debug` shows the traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module with `add_arguments(parser)` and `run(args) -> int`, one-line help)
COMMANDS = {
    "info": ("xe2rt.info", "devices, chosen targets and a summary of the shipped binaries (--isa: hot loops)"),
    "bench": ("xe2rt.bench.cli", "benchmark every kernel family against the device's bandwidth"),
    "generate": ("xe2rt.models.cli", "generate text with a Hugging Face decoder folder (Llama, Qwen3, Qwen3-MoE)"),
    "build": ("xe2rt.build.cli", "build OpenCL C (or a spec .toml) into per-target SPIR-V with a manifest"),
    "selftest": ("xe2rt.selftest", "prove every kernel on this machine's device; writes a JSON report to share"),
}

USAGE_ERROR = 2  # argparse's status for a bad command line; the same for every user error


def user_errors() -> tuple[type[BaseException], ...]:
    """What counts as the user's mistake rather than xe2rt's bug."""
    import dpctl
    from .errors import Xe2rtError
    from .models.minilm import ModelDownloadError
    return (Xe2rtError, ModelDownloadError, FileNotFoundError, dpctl.SyclDeviceCreationError,
            dpctl.SyclQueueCreationError)


class _Parser(argparse.ArgumentParser):
    """argparse with a bad command line reported in one line (its usage block named every family three times)."""

    def error(self, message):
        print(f"{self.prog}: error: {message} (--help shows the options)", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m xe2rt")
    debug = dict(action="store_true", help="show the traceback of an error instead of one line")
    parser.add_argument("--debug", **debug)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
        # also accepted after the subcommand; SUPPRESS keeps a --debug given before it
        command.add_argument("--debug", **debug, default=argparse.SUPPRESS)
        importlib.import_module(module).add_arguments(command)
    return parser


# options whose value may start with "-" without being a plain negative number (argparse would read "-1,2" as an
# option and print its usage block): "--prompt-ids -1,2" is passed on as "--prompt-ids=-1,2", so the command's own
# check reports the id in one line
DASH_VALUE_OPTIONS = ("--prompt-ids",)


def _attach_dash_values(argv: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] in DASH_VALUE_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-") \
                and argv[i + 1] not in ("-h", "--help"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(_attach_dash_values(sys.argv[1:] if argv is None else list(argv)))
    try:
        from . import _icd, config
        _icd.setup()  # raised at import too, then deferred to here (see xe2rt/__init__.py)
        config.icd_setup_enabled()
        config.forced_target()
        return importlib.import_module(COMMANDS[args.command][0]).run(args)
    except user_errors() as exc:
        if args.debug:
            raise
        print(f"xe2rt {args.command}: error: {exc} (--debug shows the traceback)", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())

"""The `oxygen` command-line tool: one subcommand per small module.

To add a subcommand, write a module with two functions and list it in COMMANDS:

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int | None: ...   # exit status (None = 0)

A subcommand's module is imported only when that subcommand runs, so `oxygen --help`
stays fast (no torch, no rclpy).
"""

import argparse
import importlib
import sys

# (name, module, one-line help). Order is the order shown by `oxygen --help`.
COMMANDS = [
    ("info", "oxygen_ros.commands.info", "show versions and whether the ROS/torch stack imports"),
    ("bench", "oxygen_ros.commands.bench", "benchmark sequential, shared, oxygen and parallel execution side by side"),
    ("checkpoint", "oxygen_ros.commands.checkpoint", "check a pi0.5 checkpoint directory: layout, dims, horizon, statistics, prompt format"),
    ("generate", "oxygen_ros.commands.generate", "greedy text from a model's language backbone alone (no images)"),
    ("record", "oxygen_ros.commands.record", "record the node's chunks, text, timing and diagnostics into a rosbag2 (MCAP) bag"),
    ("play", "oxygen_ros.commands.play", "publish a recorded bag's cameras and joint states back on their topics"),
    ("report", "oxygen_ros.commands.report", "summarise a recorded bag: JSON timing/latency summary and a PNG timeline"),
    ("sim", "oxygen_ros.commands.sim", "a simulated robot: rendered cameras and joint states that follow the chunks"),
    ("demo", "oxygen_ros.commands.demo", "simulated robot + node + recorder for a minute, a question, then the report"),
    ("eval", "oxygen_ros.commands.eval", "task success over held-out seeds: node, sim and recorder per episode, each bag scored from /tf"),
    ("security", "oxygen_ros.commands.security", "write an SROS2 access-control policy for the node as a params file configures it"),
    ("serve", "oxygen_ros.commands.serve", "serve openpi websocket clients (action chunks, and text on request) from one batched engine"),
]


def _command_named(argv):
    """The subcommand named on the command line, if any (top-level options take no values)."""
    names = {name for name, _, _ in COMMANDS}
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def build_parser(selected=None) -> argparse.ArgumentParser:
    """The full parser; only the `selected` subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="oxygen",
        description="oxygen_ros tools: onboard VLA inference with shared-prefix KV and "
        "cross-frame batched language decoding.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name, help_text in COMMANDS:
        cmd_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            module = importlib.import_module(module_name)
            module.add_arguments(cmd_parser)
            cmd_parser.set_defaults(_run=module.run)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_named(argv))
    args = parser.parse_args(argv)
    if args.version:
        from importlib.metadata import version

        print(version("oxygen_ros"))
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    status = args._run(args)
    return 0 if status is None else int(status)


if __name__ == "__main__":
    sys.exit(main())

"""`oxygen info`: versions of the stack and whether each part imports."""

import argparse
import importlib
import platform
import time

# (label, module) pairs checked by `oxygen info`.
MODULES = [
    ("numpy", "numpy"),
    ("torch", "torch"),
    ("rclpy", "rclpy"),
    ("rclpy.lifecycle", "rclpy.lifecycle"),
    ("oxygen_msgs", "oxygen_msgs.msg"),
    ("safetensors", "safetensors"),
    ("gguf", "gguf"),
    ("tokenizers", "tokenizers"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--skip", action="append", default=[], metavar="MODULE",
        help="do not try to import MODULE (repeatable), e.g. --skip torch",
    )


def _describe(module_name: str) -> str:
    start = time.perf_counter()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # report any import failure, keep checking the rest
        return f"FAILED ({type(exc).__name__}: {exc})"
    ms = (time.perf_counter() - start) * 1e3
    version = getattr(module, "__version__", "")
    return f"ok {version} ({ms:.0f} ms)".replace("  ", " ")


def run(args: argparse.Namespace) -> int:
    print(f"python {platform.python_version()} on {platform.machine()}")
    failed = 0
    for label, module_name in MODULES:
        if label in args.skip or module_name in args.skip:
            print(f"{label:16s} skipped")
            continue
        line = _describe(module_name)
        failed += line.startswith("FAILED")
        print(f"{label:16s} {line}")
    return 1 if failed else 0

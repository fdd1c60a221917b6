"""`oxygen report BAG --out DIR`: summary.json and timeline.png of a recorded run.

BAG is a rosbag2 folder (MCAP or sqlite3) from `oxygen record` or `ros2 bag record` of
the node's topics. The JSON has chunk intervals (mean, p50, p95, max), the achieved
rate, deadline misses, and per language request the frames and seconds from its start
to its first token and to done, and tokens/s.
"""
import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bag", help="rosbag2 folder (or its .mcap/.db3 file)")
    p.add_argument("--out", help="output folder (default: BAG_report next to the bag)")
    p.add_argument("--title", default="", help="title of the timeline plot")


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.tools.bag_summary import bag_dir, format_summary
    from oxygen_ros.tools.report import write_report

    try:
        bag = bag_dir(args.bag)
    except FileNotFoundError as e:
        print(f"oxygen report: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else bag.parent / f"{bag.name}_report"
    summary = write_report(bag, out, args.title)
    print(format_summary(summary))
    print(f"wrote {out / 'summary.json'} and {out / 'timeline.png'}")
    return 0

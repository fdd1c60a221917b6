"""`oxygen report BAG --out DIR`: summary.json and timeline.png of a recorded run.

BAG is a rosbag2 folder (MCAP or sqlite3) from `oxygen record` or `ros2 bag record` of
the node's topics. The JSON has chunk intervals (mean, p50, p95, max), the achieved
rate, deadline misses, and per language request the frames and seconds from its start
to its first token and to done, and tokens/s; `parameter_changes`: every accepted parameter
change the bag recorded on /parameter_events (time since the bag's start, node, name, old
value where the bag saw it, new value), printed as "parameter changes: ..." ("none");
`task`: the cube's place over time (table, gripper, bowl) and the episode's success,
scored from the sim's ground truth on /tf (tools/bag_task.py; null without /tf).

`--video FILE.mp4` also renders the bag's scene camera (`oxygen record --cameras`) with
the narration, memory, answers and action chunks as captions, and a still FILE.png
(tools/report_video.py).
"""
import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bag", help="rosbag2 folder (or its .mcap/.db3 file)")
    p.add_argument("--out", help="output folder (default: BAG_report next to the bag)")
    p.add_argument("--title", default="", help="title of the timeline plot")
    p.add_argument("--video", metavar="FILE.mp4",
                   help="also write the camera with captions as an H.264 MP4, and a still FILE.png")
    p.add_argument("--video-camera", metavar="TOPIC",
                   help="camera topic of the video (default: the first CompressedImage topic naming 'base')")


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.tools.bag_read import bag_dir
    from oxygen_ros.tools.bag_summary_text import format_summary
    from oxygen_ros.tools.bag_task import format_task
    from oxygen_ros.tools.report import write_report

    try:
        bag = bag_dir(args.bag)
    except FileNotFoundError as e:
        print(f"oxygen report: {e}", file=sys.stderr)
        return 2
    camera = None
    if args.video_camera and not args.video:
        print("oxygen report: --video-camera needs --video FILE.mp4", file=sys.stderr)
        return 2
    if args.video and Path(args.video).suffix.lower() != ".mp4":
        print(f"oxygen report: --video {args.video}: name an .mp4 file", file=sys.stderr)
        return 2
    if args.video:
        from oxygen_ros.tools.report_video import VideoError, choose_camera

        try:        # before the report, so a bag without cameras fails at once
            camera = choose_camera(bag, args.video_camera)
        except VideoError as e:
            print(f"oxygen report: {e}", file=sys.stderr)
            return 2
    out = Path(args.out) if args.out else bag.parent / f"{bag.name}_report"
    summary = write_report(bag, out, args.title)
    print(format_summary(summary))
    print(format_task(summary["task"]))
    print(f"wrote {out / 'summary.json'} and {out / 'timeline.png'}")
    if args.video:
        from oxygen_ros.tools.report_video import VideoError, write_video

        try:
            write_video(bag, args.video, camera)
        except VideoError as e:
            print(f"oxygen report: {e}", file=sys.stderr)
            return 2
    return 0

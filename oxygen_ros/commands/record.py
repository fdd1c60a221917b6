"""`oxygen record --out DIR`: record oxygen_node's outputs into a rosbag2 bag (no ros2 bag needed).

Records the action chunks, narration/memory/answer text, frame timing, /diagnostics and
/parameter_events (every accepted parameter change, which `oxygen report` lists)
(with --cameras also joint states and camera frames, rate-limited and compressed) until Ctrl-C / SIGTERM (or --duration), then closes the bag (metadata.yaml written),
readable by `ros2 bag info`, rosbags and Foxglove. On a ROS install the same topics:
    ros2 bag record -s mcap /joint_trajectory /frame_timing /narration /memory /answer /diagnostics /parameter_events /tf
/tf: the sim's ground truth (cube, bowl, gripper), which `oxygen report` scores.
A multi-expert model's further experts' trajectories too: their topics from --params
(expert_trajectory_topics, default joint_trajectory/<expert name> of the params' model)
and each --expert-topic.
Uses the environment's ROS_DOMAIN_ID / ROS_LOCALHOST_ONLY like any ROS tool.
"""
import argparse
import signal
import sys
import threading
import time
from datetime import datetime


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="new folder for the bag (default: oxygen_bag_<date-time> here)")
    p.add_argument("--namespace", default="/", help="the node's namespace (relative topics follow it)")
    p.add_argument("--params", metavar="YAML",
                   help="the node's params file: take topic names from it (*_topic parameters, and the "
                        "further action experts' expert_trajectory_topics of its model)")
    p.add_argument("--expert-topic", action="append", default=[], metavar="TOPIC",
                   help="also record this further action expert's JointTrajectory topic (repeatable; "
                        "--params adds the params' own)")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="rosbag2 storage")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0 = until Ctrl-C)")
    p.add_argument("--cameras", action="store_true",
                   help="also record the robot's inputs for `oxygen play`: joint states, and the camera "
                        "topics (from --params) as CompressedImage, raw ones JPEG-encoded on <topic>/compressed")
    p.add_argument("--camera-hz", type=float, default=5.0,
                   help="with --cameras: at most this many frames per camera per second (0 = all)")
    p.add_argument("--quiet", action="store_true", help="no periodic counts")


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from oxygen_ros.tools.bag_recorder import BagRecorder, expert_topics
    from oxygen_ros.tools.params_files import params_from_file
    from oxygen_ros.tools.security_policy import tool_node
    from oxygen_ros.tools.spin import spin_until_stopped

    out = args.out or datetime.now().strftime("oxygen_bag_%Y%m%d-%H%M%S")
    params = params_from_file(args.params) if args.params else None
    try:     # before ROS starts: an unknown model in the params file is the user's to fix
        experts = expert_topics(params, args.expert_topic)
    except ValueError as e:
        print(f"oxygen record: {args.params}: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)   # our handlers close the bag
    node = tool_node(BagRecorder.NODE_NAME, namespace=args.namespace)   # never writes the trail it records
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        rec = BagRecorder(node, out, args.namespace, params, args.storage, args.cameras, args.camera_hz,
                          expert_topics=experts)
    except (FileExistsError, FileNotFoundError, ValueError) as e:
        print(f"oxygen record: {e}", file=sys.stderr)
        node.destroy_node()
        rclpy.try_shutdown()
        return 2
    print(f"recording {', '.join(rec.topic_names)} to {rec.path} ({args.storage}); Ctrl-C to stop",
          flush=True)
    rec.report_when_matched()
    def status(elapsed_s: float) -> None:
        print(f"  {elapsed_s:5.0f} s: {sum(rec.counts.values())} messages", flush=True)
    try:
        spin_until_stopped(executor, stop, args.duration, None if args.quiet else status)
        _drain(executor, rec)
    finally:
        rec.close()
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown()
    counts = ", ".join(f"{name} {n}" for name, n in rec.counts.items())
    print(f"bag closed: {rec.path} ({counts})", flush=True)
    from oxygen_ros.fast_exit import exit_now

    exit_now(0)         # everything is closed: skip the interpreter's slow teardown


def _drain(executor, rec, quiet_s: float = 0.2, limit_s: float = 3.0) -> None:
    """Take what DDS already delivered: spin until no message of the node's arrived for
    quiet_s (robot inputs never go quiet)."""
    end = time.monotonic() + limit_s
    seen, quiet_since = -1, time.monotonic()
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.01)
        total = sum(rec.counts[name] for name in rec.output_topics)
        if total != seen:
            seen, quiet_since = total, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return

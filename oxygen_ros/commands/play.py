"""`oxygen play BAG`: publish a recorded run's cameras and joint states back on their topics.

For a bag recorded with `oxygen record --cameras` (or any rosbag2 bag with sensor_msgs
Image/CompressedImage/JointState topics): at the recorded pace, or --rate times faster, so
oxygen_node runs offline on real data. On a ROS install: `ros2 bag play BAG --clock` with
the node's use_sim_time:=true. Uses the environment's ROS_DOMAIN_ID / ROS_LOCALHOST_ONLY.
"""
import argparse
import signal
import sys
import threading


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bag", help="the bag folder (metadata.yaml and an MCAP or sqlite3 file)")
    p.add_argument("--rate", type=float, default=1.0, help="playback speed, times the recorded pace")
    p.add_argument("--namespace", default="",
                   help="prefix the recorded topic names with this namespace (for a node running in it)")


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from oxygen_ros.tools.bag_player import BagPlayer
    from oxygen_ros.tools.security_policy import PLAYER_NODE, tool_node

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = tool_node(PLAYER_NODE)      # its own parameter events off /parameter_events
    try:
        try:
            player = BagPlayer(node, args.bag, args.rate, args.namespace)
        except (FileNotFoundError, ValueError) as e:
            print(f"oxygen play: {e}", file=sys.stderr)
            return 2
        print(f"playing {', '.join(player.counts)} from {args.bag} ({player.duration_s:.1f} s at "
              f"{args.rate:g}x); Ctrl-C to stop", flush=True)
        counts = player.play(stop)
        player.close()
        print("played: " + ", ".join(f"{t} {n}" for t, n in counts.items()), flush=True)
        return 130 if stop.is_set() else 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown()

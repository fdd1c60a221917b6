"""`oxygen sim`: a simulated Franka Panda for oxygen_node (MuJoCo physics, rendered cameras,
joints that follow chunks as a Jazzy joint_trajectory_controller would).

Topic names, joint names and joint limits come from the node's params file (default
config/demo.yaml; 8 joints: the Panda's 7 arm joints, then its finger width), so the node
and the robot agree:
    oxygen sim --params config/demo.yaml            # then, in another terminal:
    oxygen_node --ros-args --params-file config/demo.yaml -p autostart:=true
Uses the environment's ROS_DOMAIN_ID / ROS_LOCALHOST_ONLY like any ROS node.
With --lockstep the sim owns the clock (/clock) and advances it one replanning period per
chunk the node computed from its latest observation (tools/sim_lockstep.py; the node runs
with use_sim_time:=true): `oxygen eval --clock sim`. A fleet's sims keep step on one clock:
one publishes /clock and names the others (--lockstep-peers), the others run with --no-clock.
"""
import argparse
import signal
import sys
import threading


def _rates(text: str) -> list[float]:
    """"15" (every camera) or "10,5,5" (one per camera, in camera_topics order)."""
    return [float(v) for v in text.split(",") if v.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", metavar="YAML", help="the node's params file (default: config/demo.yaml)")
    p.add_argument("--joints", help="comma-separated joint names instead of the params file's "
                                    "(8: the Panda's 7 arm joints, then the finger width; "
                                    "limits -1..1 each, within the Panda's)")
    p.add_argument("--namespace", default="/", help="the node's namespace (relative topics follow it)")
    p.add_argument("--image-size", type=int, default=160, help="camera images are SIZE x SIZE rgb8")
    p.add_argument("--compressed", choices=("jpeg", "png"), default="",
                   help="publish sensor_msgs/CompressedImage in this format on <topic>/compressed "
                        "(image_transport's name); topics the params file already takes compressed "
                        "get it without the suffix")
    p.add_argument("--jpeg-quality", type=int, default=90, help="JPEG quality, 1..100")
    p.add_argument("--camera-hz", type=_rates, default=[15.0], metavar="HZ[,HZ...]",
                   help="camera frame rate: one for every camera, or one per camera (camera_topics order)")
    p.add_argument("--joint-hz", type=float, default=100.0,
                   help="joint state rate (at most --control-hz: they go out from the control update)")
    p.add_argument("--control-hz", type=float, default=100.0,
                   help="trajectory controller update rate (and simulation step)")
    p.add_argument("--seed", type=int, default=None,
                   help="place the cube and the bowl by this seed (tools/panda_scene.layout; "
                        "default: the scene's fixed layout)")
    p.add_argument("--tf-hz", type=float, default=20.0,
                   help="rate of the ground truth on /tf (cube, bowl, gripper in world; 0 = off)")
    p.add_argument("--lockstep", action="store_true",
                   help="sim time: publish /clock and advance it by one replanning period (1 / the params "
                        "file's control_rate_hz) per chunk computed from the latest observation; the node "
                        "runs with use_sim_time:=true (tools/sim_lockstep.py)")
    p.add_argument("--no-clock", action="store_true",
                   help="with --lockstep: do not publish /clock (a fleet's other robots: one sim publishes it); "
                        "each observation waits until /clock has reached its time")
    p.add_argument("--lockstep-peers", default="", metavar="NS[,NS...]",
                   help="with --lockstep, for the fleet's sim that publishes /clock: the other robots' "
                        "namespaces; /clock moves on only once each of their sims has reached the time")
    p.add_argument("--blackout", action="store_true", help="publish black camera images (nothing rendered)")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0 = until Ctrl-C)")
    p.add_argument("--quiet", action="store_true", help="no periodic status lines")


def sim_params(args) -> dict:
    from oxygen_ros.tools.params_files import config_file, params_from_file

    params = params_from_file(args.params or config_file("demo.yaml"))
    if args.joints:
        names = [n.strip() for n in args.joints.split(",") if n.strip()]
        params.update(joint_names=names, joint_lower_limits=[-1.0] * len(names),
                      joint_upper_limits=[1.0] * len(names))
    return params


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from oxygen_ros.tools.security_policy import SIM_NODE, tool_node
    from oxygen_ros.tools.sim_robot import SimRobot
    from oxygen_ros.tools.spin import spin_until_stopped

    params = sim_params(args)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = tool_node(SIM_NODE, namespace=args.namespace)     # its own parameter events off /parameter_events
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    robot = None
    try:
        try:
            if args.lockstep:
                from oxygen_ros.tools.sim_lockstep import LockstepSim

                robot = LockstepSim(node, params, 1.0 / float(params["control_rate_hz"]),
                                    publish_clock=not args.no_clock, tf_hz=args.tf_hz,
                                    peers=[n.strip() for n in args.lockstep_peers.split(",") if n.strip()],
                                    control_hz=args.control_hz, image_size=args.image_size,
                                    compressed=args.compressed, jpeg_quality=args.jpeg_quality,
                                    seed=args.seed, blackout=args.blackout)
            else:
                robot = SimRobot(node, params, args.image_size, args.camera_hz, args.joint_hz,
                                 args.compressed, args.jpeg_quality, args.control_hz,
                                 tf_hz=args.tf_hz, seed=args.seed, blackout=args.blackout)
        except (ValueError, RuntimeError) as e:   # wrong joint count, rates, no GL: say why
            print(f"sim: cannot start: {e}", file=sys.stderr, flush=True)
            return 2
        cams = ", ".join(p.topic_name + (f" {fmt}" if fmt else "") + ("" if args.lockstep else f" {hz:g} Hz")
                         for (p, _, fmt), hz in zip(robot.cameras, robot.camera_hz))
        print(f"sim: MuJoCo Panda, {len(robot.cameras)} cameras ({cams}) {args.image_size}x{args.image_size}, "
              f"{len(robot.world.names)} joints on {robot.joint_pub.topic_name} at "
              + (f"{args.joint_hz:g} Hz" if not args.lockstep else
                 f"each step; lock-step sim time, {robot.period_s:g} s a chunk")
              + "; following chunks; Ctrl-C to stop", flush=True)

        def status(elapsed_s: float) -> None:
            cube = ", ".join(f"{v:.2f}" for v in robot.world.cube_position())
            print(f"sim: {elapsed_s:5.0f} s, {robot.chunks} chunks followed, cube at ({cube}) m, "
                  f"frames {robot.frames}", flush=True)
        spin_until_stopped(executor, stop, args.duration, None if args.quiet else status)
        print(f"sim: stopped after {robot.chunks} chunks", flush=True)
        if args.lockstep:
            print(f"sim: lockstep: {robot.cycles} steps to sim time {robot.t:.3f} s, {robot.ignored} chunks "
                  "ignored (not from the latest observation)"
                  + (f"; /clock waited for its peers {robot.peer_waits} times" if args.lockstep_peers else ""),
                  flush=True)
        s = robot.summary()
        print(f"sim: {s['rejected']} trajectories rejected; {s['count']} chunk boundaries, position jump "
              f"max {s['position_max']:.4f} p95 {s['position_p95']:.4f} rad, velocity jump max "
              f"{s['velocity_max']:.3f} p95 {s['velocity_p95']:.3f} rad/s", flush=True)
    finally:
        if robot is not None:
            robot.close()
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown()
    from oxygen_ros.fast_exit import exit_now

    exit_now(0)         # everything is closed: skip the interpreter's slow teardown

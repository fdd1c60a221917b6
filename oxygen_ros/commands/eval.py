"""`oxygen eval --seeds A-B`: task success of the node's policy over held-out seeds.

Each episode runs oxygen_node (its own process, real DDS), `oxygen sim --seed S` and
`oxygen record`, then scores the bag from the sim's /tf (tools/evaluation.py runs the
episodes, tools/eval_scoring.py scores them). Prints a line per episode as it finishes,
then a table (success rate with its 95% Wilson interval, episode length, narration
accuracy; per robot in a fleet), and writes the JSON (--json, default OUT/eval.json). Training seeds (1000-1999) are refused unless --allow-training-seeds.
docs/training.md, "Evaluation".
"""
import argparse
import json
import signal
import threading
from datetime import datetime
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", required=True, help="e.g. 900000-900049 or 900000,900003-900005")
    p.add_argument("--params", metavar="YAML",
                   help="the node's params file (default: config/smol_panda.yaml, the trained demo profile)")
    p.add_argument("--clock", choices=("sim", "wall"), default="sim",
                   help="sim: use_sim_time, the sim advances one replanning period per chunk (lock-step: the "
                        "CPU's speed does not decide the outcome); wall: real time at the rate this machine "
                        "holds, measured as `oxygen demo` measures it")
    p.add_argument("--language", choices=("off", "on", "questions"), default="on",
                   help="off: no narration, memory or questions; on: the params file's narration and memory; "
                        "questions: on, plus a question every 5 s (unless --questions-every)")
    p.add_argument("--questions-every", type=float, default=0.0, metavar="S",
                   help="ask 'what have you done?' every S seconds of episode time (0: never)")
    p.add_argument("--rtc", choices=("off", "guided"), default=None, help="RTC mode (default: the params file's)")
    p.add_argument("--robots", type=int, default=0, metavar="N",
                   help="fleet mode: one node serves N robots, each with its own sim and seed")
    p.add_argument("--cameras", choices=("on", "off"), default="on",
                   help="off: the sims publish black camera images (do the words come from the image?)")
    p.add_argument("--duration", type=float, default=20.0, help="episode seconds after the first frame")
    p.add_argument("--settle", type=float, default=1.0,
                   help="an episode ends early once the cube has been in the bowl this long")
    p.add_argument("--rate", type=float, default=0.0, metavar="HZ",
                   help="the node's wall-clock rate (0: with --clock sim and one robot, 10 Hz ticks that act on each "
                        "observation as soon as the sim publishes it; otherwise measured as `oxygen demo` does); "
                        "with --clock sim the sim time per chunk stays the params file's period")
    p.add_argument("--image-size", type=int, default=128, help="simulated camera images (px)")
    p.add_argument("--record-cameras", action="store_true", help="bags also hold the camera frames (videos)")
    p.add_argument("--out", help="output folder (default: out/eval-<date-time>)")
    p.add_argument("--json", help="results file (default: OUT/eval.json)")
    p.add_argument("--allow-training-seeds", action="store_true", help="allow seeds 1000-1999")
    p.add_argument("--startup-timeout", type=float, default=600.0, help="seconds for the node's first frame")
    p.add_argument("--episode-timeout", type=float, default=0.0,
                   help="wall seconds an episode may take after its first frame (0: 60 + 40 x --duration)")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: random 1..100)")


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.tools import eval_scoring as scoring
    from oxygen_ros.tools import evaluation as ev
    from oxygen_ros.tools.params_files import checkout_root, config_file

    try:
        seeds = scoring.parse_seeds(args.seeds)
    except ValueError as e:
        print(f"oxygen eval: {e}")
        return 2
    training = scoring.training_seeds_in(seeds)
    if training and not args.allow_training_seeds:
        print(f"oxygen eval: seeds {training[0]}..{training[-1]} are training seeds (1000-1999); evaluate on "
              f"held-out seeds ({scoring.HELD_OUT_FROM} and up) or pass --allow-training-seeds")
        return 2
    if args.params:
        params = Path(args.params)
    else:
        try:
            params = config_file("smol_panda.yaml")
        except FileNotFoundError:
            print("oxygen eval: config/smol_panda.yaml (the trained profile) is not here: pass --params YAML")
            return 2
    out = Path(args.out) if args.out else (checkout_root() or Path.cwd()) / "out" / datetime.now().strftime(
        "eval-%Y%m%d-%H%M%S")
    questions = args.questions_every or (5.0 if args.language == "questions" else 0.0)
    opts = ev.Options(params=params, seeds=seeds, out=out.resolve(), clock=args.clock,
                      language="off" if args.language == "off" else "on", questions_every_s=questions,
                      rtc=args.rtc or "", robots=args.robots, blackout=args.cameras == "off", duration_s=args.duration,
                      settle_s=args.settle, rate_hz=args.rate, image_size=args.image_size,
                      record_cameras=args.record_cameras, startup_timeout_s=args.startup_timeout,
                      episode_timeout_s=args.episode_timeout)
    domain = ev.isolate_dds(args.domain_id)          # before rclpy initialises, inherited by every child

    import rclpy
    from rclpy.signals import SignalHandlerOptions

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    evaluation = ev.Evaluation(opts, stop=stop)
    print(f"oxygen eval: {len(seeds)} seeds, model {evaluation.params.get('model')} from {params}, clock {args.clock}, "
          f"language {opts.language}" + (f" (a question every {questions:g} s)" if questions else "")
          + f", RTC {evaluation.params.get('rtc_mode')}"
          + (f", {len(evaluation.robot_names)} robots" if args.robots else "")
          + (", cameras off (black images)" if args.cameras == "off" else "")
          + f"; DDS domain {domain}, localhost only; output {opts.out}", flush=True)
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    try:
        result = evaluation.run()
    finally:
        rclpy.try_shutdown()
    path = Path(args.json) if args.json else opts.out / "eval.json"
    path.write_text(json.dumps(result, indent=1))
    print(scoring.format_table(result))
    print(f"wrote {path}")
    return 130 if stop.is_set() else 0 if result["overall"]["failed_to_run"] == 0 else 1

"""`oxygen serve`: the engine behind openpi's websocket wire (docs/serving.md).

    oxygen serve --model tiny --inputs libero                       # random weights: tests, demos
    OXYGEN_API_KEY=... oxygen serve --model pi05 --checkpoint DIR --host 0.0.0.0

Each connection is one robot (a session) of one fleet engine: observations of the open
sessions are batched into one frame, each chunk goes back as soon as the batch has it, and
the sessions' narrations, memory entries and answers decode together after it. Binds
127.0.0.1 unless told otherwise. Ctrl-C or SIGTERM stop it.
"""
import argparse
import os
import signal
import sys

API_KEY_ENV = "OXYGEN_API_KEY"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from oxygen_ros.serving.robot_inputs import INPUTS

    p.add_argument("--model", default="tiny", help="model profile (docs/models.md)")
    p.add_argument("--checkpoint", help="checkpoint directory (its policy I/O shapes inputs and actions)")
    p.add_argument("--inputs", choices=sorted(INPUTS),
                   help="the clients' observation keys (openpi's robot configs); default: from the "
                        "checkpoint's asset id")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free one, printed)")
    p.add_argument("--api-key", default="",
                   help=f"require `Authorization: Api-Key <key>` on connect (default: ${API_KEY_ENV} if set; "
                        "prefer the variable: a command line is visible to every user of the machine)")
    p.add_argument("--max-sessions", type=int, default=4,
                   help="sessions served at once; a connection beyond them gets HTTP 503")
    p.add_argument("--max-connections", type=int, default=0,
                   help="TCP connections at once, handshakes included; more are dropped before their "
                        "handshake (default: 4 per session)")
    p.add_argument("--idle-timeout", type=float, default=30.0,
                   help="seconds a session may neither send an observation nor read its reply before it "
                        "is closed, freeing its slot (0: never)")
    p.add_argument("--window-ms", type=float, default=5.0,
                   help="how long a frame waits for the other sessions' observations after the first")
    p.add_argument("--max-message-mb", type=float, default=32.0, help="largest message accepted")
    p.add_argument("--steps-per-frame", type=int, default=4, help="decode steps k per frame")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens per narration, memory entry or answer")
    p.add_argument("--max-requests", type=int, default=8, help="language requests decoded at once (KV slots)")
    p.add_argument("--question-timeout", type=float, default=60.0,
                   help="seconds a question may take unless its oxygen/ask_timeout_s says otherwise")
    p.add_argument("--seed", type=int, default=0, help="each session's action noise starts from this seed")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")


def _inputs_name(args, io) -> str:
    if args.inputs:
        return args.inputs
    asset = (getattr(io, "asset_id", None) or "").lower()
    for name, hints in (("libero", ("libero",)), ("droid", ("droid",)), ("aloha", ("aloha", "trossen"))):
        if any(h in asset for h in hints):
            return name
    raise ValueError("say which observation keys the clients send: --inputs libero, droid or aloha"
                     + (f" (the checkpoint's asset id {asset!r} does not tell)" if asset else ""))


def build(args, log=print):
    """(hub, server) ready to run, from the command's arguments."""
    from oxygen_ros.engine.text import prompts
    from oxygen_ros.engine.factory import checkpoint_policy_io
    from oxygen_ros.engine.fleet import FleetEngine
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.scheduler import EngineConfig
    from oxygen_ros.serving.policy_adapters import AsGiven, ThroughPolicyIO
    from oxygen_ros.serving.robot_inputs import INPUTS
    from oxygen_ros.serving.server import OpenpiServer, check_api_key
    from oxygen_ros.serving.sessions import ASK_KEY, ASK_TIMEOUT_KEY, STREAM_KEYS, Language, SessionHub

    api_key = args.api_key or os.environ.get(API_KEY_ENV, "")
    check_api_key(api_key)         # before the model loads: a key no client can send is an error now
    if args.max_sessions < 1:
        raise ValueError("--max-sessions must be at least 1")
    if args.idle_timeout < 0 or args.max_connections < 0:
        raise ValueError("--idle-timeout and --max-connections must not be negative")
    log(f"loading model {args.model} ...")
    model, tok = load_model(args.model, checkpoint=args.checkpoint, dtype=args.dtype, device=args.device)
    io = checkpoint_policy_io(args.model, args.checkpoint, model, tok)
    inputs = INPUTS[_inputs_name(args, io)]
    adapter = ThroughPolicyIO(io) if io is not None else AsGiven()
    dims = io.action_dims if io is not None else model.cfg.expert.action_dim
    if dims < inputs.action_dims:
        raise ValueError(f"{inputs.name} robots take {inputs.action_dims} action dimensions, the model gives {dims}")
    cameras = min(len([c for c in inputs.cameras if c]), len(model.cfg.camera_slots))
    config = EngineConfig(max_requests=args.max_requests, max_new_tokens=args.max_tokens,
                          steps_per_frame=args.steps_per_frame, seed=args.seed, cameras=cameras)
    engine = FleetEngine(model, tok, config, max_robots=args.max_sessions)
    language = Language(prompts.NARRATION, prompts.MEMORY, prompts.ANSWER, args.max_tokens,
                        question_timeout_s=args.question_timeout)
    hub = SessionHub(engine, model, tok, adapter, language, args.max_sessions, args.window_ms / 1e3,
                     args.seed, log=log)
    metadata = {"server": "oxygen serve", "model": args.model, "inputs": inputs.name,
                "observation_keys": inputs.keys, "action_horizon": model.cfg.expert.horizon,
                "action_dims": inputs.action_dims, "policy_io": adapter.name,
                "extensions": {"language": {"request_keys": [*STREAM_KEYS.values(), ASK_KEY, ASK_TIMEOUT_KEY],
                                            "reply_keys": ["oxygen/text", "oxygen/requests"]}}}
    server = OpenpiServer(hub, inputs, metadata, api_key, int(args.max_message_mb * 2**20), log=log,
                          idle_timeout_s=args.idle_timeout, max_connections=args.max_connections)
    return hub, server


def run(args: argparse.Namespace) -> int:
    import asyncio

    def log(line: str) -> None:
        print(f"serve: {line}", flush=True)

    try:
        hub, server = build(args, log)
    except (ValueError, OSError) as e:
        print(f"oxygen serve: {e}", file=sys.stderr)
        return 2
    hub.start()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await server.run(args.host, args.port, stop=stop, ready=lambda port: log(
            f"listening on ws://{args.host}:{port} (model {args.model}, {server.inputs.name} inputs, "
            f"at most {args.max_sessions} sessions{', API key required' if server.api_key else ''}); "
            "Ctrl-C to stop"))

    try:
        asyncio.run(main())
    except OSError as e:       # the port is taken, the address is not ours
        print(f"oxygen serve: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    finally:
        hub.stop()
    log(f"stopped after {hub.frames} frames")
    return 0

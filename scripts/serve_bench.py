#!/usr/bin/env python3
"""`oxygen serve` with N websocket clients: one batched server against one client at a time.

Two servers on 127.0.0.1 share one model: "batched" is `oxygen serve` as it runs (each
frame batches every waiting session), "one at a time" runs one session's observation per
frame, oldest first (what a server that does not batch, openpi's own, gives concurrent
clients). N client threads each send LIBERO-style observations in a closed loop (send,
wait for the reply, send the next), as openpi's examples do. Both sides take turns in
every round, so the machine's noise lands on both. Per client: chunks per second and the
reply latency (send to reply); the ratio of chunk rates per round.

    .venv/bin/python scripts/serve_bench.py --model tiny --clients 1,2,4
    .venv/bin/python scripts/serve_bench.py --model smol --clients 1,2,4 --steps 6 --rounds 3 --json out.json
"""
import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from argparse import Namespace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Running:
    """A hub + websocket server in a thread of this process."""

    def __init__(self, hub, server):
        self.hub, self.server = hub, server
        ready = threading.Event()

        async def main():
            self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
            await server.run("127.0.0.1", 0, ready=lambda port: (setattr(self, "port", port), ready.set()),
                             stop=self.stop)

        hub.start()
        self.thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        self.thread.start()
        ready.wait(30)

    def close(self):
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)
        self.hub.stop()


def servers(args):
    """(batched, one at a time), on one model."""
    from oxygen_ros.commands.serve import build
    from oxygen_ros.engine.fleet import FleetEngine
    from oxygen_ros.serving.server import OpenpiServer
    from oxygen_ros.serving.sessions import SessionHub

    n = max(args.clients)
    ns = Namespace(model=args.model, checkpoint=None, inputs="libero", host="127.0.0.1", port=0, api_key="",
                   max_sessions=n, window_ms=args.window_ms, max_message_mb=32.0, steps_per_frame=args.k,
                   max_tokens=args.tokens, max_requests=2 * n, question_timeout=60.0, seed=0, dtype="float32",
                   device="cpu", idle_timeout=0.0, max_connections=0)   # the servers take turns: none is idle
    hub, server = build(ns, log=lambda line: None)
    engine = FleetEngine(hub.model, hub.tok, hub.engine.config, max_robots=n)
    one_hub = SessionHub(engine, hub.model, hub.tok, hub.adapter, hub.language, n, 0.0, log=lambda line: None,
                         max_batch=1)
    one = OpenpiServer(one_hub, server.inputs, server.metadata, log=lambda line: None, idle_timeout_s=0.0)
    return Running(hub, server), Running(one_hub, one)


def observation(rng, narrate: bool) -> dict:
    obs = {"observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
           "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
           "observation/state": rng.uniform(-1, 1, 8), "prompt": "pick up the red cube"}
    if narrate:
        obs["oxygen/narrate"] = True
    return obs


def run_clients(port: int, clients: int, steps: int, narrate_every: int, seed: int) -> list[dict]:
    """Each client's chunk rate and latencies over `steps` observations, all at once."""
    from websockets.sync.client import connect

    from oxygen_ros.serving.wire import pack, unpack

    results = [None] * clients
    start = threading.Barrier(clients)

    def client(i):
        rng = np.random.default_rng(seed + i)
        with connect(f"ws://127.0.0.1:{port}", max_size=None, compression=None) as ws:
            unpack(ws.recv())
            start.wait()
            latencies, t0 = [], time.perf_counter()
            for step in range(steps):
                msg = pack(observation(rng, narrate_every and step % narrate_every == 0))
                sent = time.perf_counter()
                ws.send(msg)
                reply = ws.recv()
                if isinstance(reply, str):
                    raise RuntimeError(reply)
                latencies.append((time.perf_counter() - sent) * 1e3)
            results[i] = {"chunk_hz": steps / (time.perf_counter() - t0), "latency_ms": latencies}

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(r is None for r in results):
        raise RuntimeError("a client failed")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--clients", default="1,2,4", help="client counts, comma-separated")
    ap.add_argument("--steps", type=int, default=20, help="observations per client per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16, help="tokens per narration")
    ap.add_argument("--narrate-every", type=int, default=4, help="a narration request every N observations")
    ap.add_argument("--k", type=int, default=4, help="decode steps per frame")
    ap.add_argument("--window-ms", type=float, default=5.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]

    print(f"loading {args.model} ...", file=sys.stderr)
    batched, one = servers(args)
    report = {"model": args.model, "settings": {k: v for k, v in vars(args).items() if k != "json"}, "clients": {}}
    try:
        for n in args.clients:
            sides = {"batched": [], "one_at_a_time": []}
            ratios = []
            run_clients(batched.port, n, 2, 0, 0)            # warm-up of both
            run_clients(one.port, n, 2, 0, 0)
            for r in range(args.rounds):
                order = [("batched", batched), ("one_at_a_time", one)][:: 1 if r % 2 == 0 else -1]
                rates = {}
                for name, srv in order:
                    res = run_clients(srv.port, n, args.steps, args.narrate_every, 100 * r)
                    sides[name] += res
                    rates[name] = statistics.mean(x["chunk_hz"] for x in res)
                ratios.append(rates["batched"] / rates["one_at_a_time"])
                print(f"  {n} client(s), round {r + 1}: batched {rates['batched']:.2f}, one at a time "
                      f"{rates['one_at_a_time']:.2f} chunks/s per client", file=sys.stderr)
            entry = {}
            for name, res in sides.items():
                lat = [v for x in res for v in x["latency_ms"]]
                entry[name] = {"chunk_hz_per_client": statistics.mean(x["chunk_hz"] for x in res),
                               "latency_ms_p50": float(np.percentile(lat, 50)),
                               "latency_ms_p95": float(np.percentile(lat, 95))}
            entry["chunk_hz_ratio_median"] = statistics.median(ratios)
            entry["chunk_hz_ratio_spread"] = [min(ratios), max(ratios)]
            report["clients"][str(n)] = entry
    finally:
        batched.close()
        one.close()
    print("clients  side            chunks/s/client  latency p50 ms  p95 ms")
    for n, e in report["clients"].items():
        for name in ("one_at_a_time", "batched"):
            m = e[name]
            print(f"{n:>7}  {name:<14} {m['chunk_hz_per_client']:>16.2f} {m['latency_ms_p50']:>15.1f} "
                  f"{m['latency_ms_p95']:>7.1f}")
        lo, hi = e["chunk_hz_ratio_spread"]
        print(f"         batched / one at a time x{e['chunk_hz_ratio_median']:.2f} [{lo:.2f}-{hi:.2f}]")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

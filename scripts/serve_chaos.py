#!/usr/bin/env python3
"""`oxygen serve --model tiny` with good openpi clients beside hostile ones, on 127.0.0.1.

The server runs in a child process, built by the command's own code (commands/serve.py
`build`, its arguments parsed by the command's parser), so its RSS is its own; a pipe to
it reads the hub's and engine's bookkeeping (sessions, text routes, live and queued
language requests, free KV slots) between samples. Good clients (threads of this process)
step like openpi's client: send a LIBERO observation, wait for the reply, again; every 4th
asks for a narration, every 8th for a memory entry. Hostile clients (threads of another
process, so their Python work does not slow the good clients' threads) each rotate through:
  bombs        a million empty arrays in 1 MB, a tree of 266k lists (WireError, 1011)
  strings      a 100 kB prompt (WireError), narrate/ask over their caps (refused in the reply)
  pipelining   8 float observations (1.2 MB each) sent back to back, then their replies read
  ask-and-go   connect, send an observation asking a question and a narration, disconnect
  idle         connect and hold the session without sending (closed by --idle-timeout)

Phases: warm-up (good only, not counted), baseline (good only), chaos (good + hostile),
after (good only, once the hostile process has exited). Printed: the good clients' chunk
rate per phase and chaos/baseline, good sessions closed, the hostile clients' outcomes,
server RSS over time (after warm-up, peak, end), and the hub/engine state after the hostile
ones leave (every session, text route and live or queued request must be a good client's).

    .venv/bin/python scripts/serve_chaos.py --minutes 10               # the benchmark run
    .venv/bin/python scripts/serve_chaos.py --minutes 1 --baseline-s 20  # a smoke check
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BOMB = b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1_000_000
TREE = b"\xde\x00\x40" + b"".join(b"\xa2k" + bytes([i]) + (b"\xdc\x00\x40" + (b"\xdc\x00\x40" + b"\x90" * 64) * 64)
                                  for i in range(64))
KINDS = ("bombs", "strings", "pipelining", "ask-and-go", "idle")


# ------------------------------------------------------------------ the server (child process)
def _server_main(serve_argv: list[str], conn) -> None:
    import asyncio

    from oxygen_ros.commands.serve import add_arguments, build

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(serve_argv)
    hub, server = build(args, log=lambda line: None)
    hub.start()

    def stats() -> dict:
        for _ in range(20):          # the engine thread may change a dict while it is copied
            try:
                eng = hub.engine
                open_ = sorted(r for r, s in list(hub._sessions.items()) if not s.closed)
                routes = sorted({s.robot for s in list(hub._owner.values())})
                live = [eng.owner.get(lv.req.request_id, "?") for lv in list(eng.core.live)]
                queued = {r: len(q) for r, q in list(eng.queues.items()) if q}
                return {"open_sessions": open_, "route_owners": routes, "routes": len(hub._owner),
                        "live_requests_by": sorted(live), "queued_by": queued,
                        "language_slots": eng.config.max_requests, "kv_pool_free": eng.core.pool.free_slots,
                        "kv_pool_capacity": eng.core.pool.capacity,
                        "frames": hub.frames, "tcp_connections": server.connections,
                        "dropped_connections": server.dropped}
            except RuntimeError:
                time.sleep(0.01)
        return {}

    def answer() -> None:
        while True:
            try:
                conn.recv()
            except EOFError:
                return
            conn.send(stats())

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (answer(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
        await server.run("127.0.0.1", 0, ready=lambda port: conn.send({"port": port}), stop=stop)

    try:
        asyncio.run(main())
    finally:
        hub.stop()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


# ------------------------------------------------------------------ clients
def observation(rng, floats: bool = False, **extra) -> dict:
    if floats:
        images = [rng.random((224, 224, 3), dtype=np.float32) for _ in range(2)]
    else:
        images = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(2)]
    return {"observation/image": images[0], "observation/wrist_image": images[1],
            "observation/state": rng.uniform(-1, 1, 8), "prompt": "pick up the red cube", **extra}


def connect(url):
    from websockets.sync.client import connect as ws_connect

    from oxygen_ros.serving.wire import unpack

    ws = ws_connect(url, max_size=None, compression=None, open_timeout=20).__enter__()
    unpack(ws.recv(timeout=30))          # the metadata
    return ws


class Good(threading.Thread):
    """An openpi client: one observation, its reply, the next; chunk times recorded."""

    def __init__(self, url: str, index: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.url, self.index, self.stop = url, index, stop
        self.chunk_times: list[float] = []
        self.closed: list[str] = []          # why a session of this client ended
        self.errors: list[str] = []

    def run(self) -> None:
        from websockets.exceptions import ConnectionClosed

        from oxygen_ros.serving.wire import pack, unpack

        rng = np.random.default_rng(self.index)
        ws, step = connect(self.url), 0
        while not self.stop.is_set():
            extra = {}
            if step % 4 == 0:
                extra["oxygen/narrate"] = True
            if step % 8 == 4:
                extra["oxygen/remember"] = True
            try:
                ws.send(pack(observation(rng, **extra)))
                reply = ws.recv(timeout=60)
            except (ConnectionClosed, TimeoutError, OSError) as e:
                self.closed.append(f"{type(e).__name__}: {e}")
                ws = self.reconnect()
                continue
            if isinstance(reply, str):
                self.errors.append(reply[:200])
                continue
            if "actions" in unpack(reply):
                self.chunk_times.append(time.monotonic())
            step += 1
        ws.close()

    def reconnect(self):
        from websockets.exceptions import ConnectionClosed, InvalidHandshake

        while True:
            try:
                return connect(self.url)
            except (InvalidHandshake, ConnectionClosed, OSError, TimeoutError) as e:
                self.closed.append(f"reconnecting: {type(e).__name__}: {e}")
                time.sleep(0.1)


def _hostile_main(url: str, n: int, seconds: float, rotate_s: float, kinds: tuple, out) -> None:
    """n hostile clients for `seconds`, each rotating through `kinds` every rotate_s."""
    stop = threading.Event()
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def count(what: str) -> None:
        with lock:
            counts[what] = counts.get(what, 0) + 1

    def client(i: int) -> None:
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

        from oxygen_ros.serving.wire import pack

        rng = np.random.default_rng(100 + i)
        start = time.monotonic()
        while not stop.is_set():
            kind = kinds[(i + int((time.monotonic() - start) / rotate_s)) % len(kinds)]
            try:
                ws = connect(url)
            except InvalidStatus as e:
                count(f"refused {e.response.status_code}")
                time.sleep(0.05)
                continue
            except (InvalidHandshake, ConnectionClosed, OSError, TimeoutError):   # over --max-connections
                count("connect dropped")
                time.sleep(0.05)
                continue
            try:
                if kind == "bombs":
                    ws.send(BOMB if rng.random() < 0.5 else TREE)
                    count("bomb: " + ws.recv(timeout=60).split(":")[0])
                elif kind == "strings":
                    which = rng.integers(3)
                    if which == 0:
                        ws.send(pack(observation(rng, prompt="x" * 100_000)))
                        count("100 kB prompt: " + str(ws.recv(timeout=60)).split(":")[0])
                    else:
                        key = "oxygen/narrate" if which == 1 else "oxygen/ask"
                        for _ in range(5):
                            ws.send(pack(observation(rng, **{key: "why " * 800})))
                            reply = ws.recv(timeout=60)
                            count(f"{key} over cap: " + ("refused in reply" if isinstance(reply, bytes) else "text"))
                elif kind == "pipelining":
                    for _ in range(8):
                        ws.send(pack(observation(rng, floats=True)))
                    for _ in range(8):
                        ws.recv(timeout=120)
                    count("pipelined 8")
                elif kind == "ask-and-go":
                    ws.send(pack(observation(rng, **{"oxygen/ask": "what have you done?", "oxygen/narrate": True,
                                                     "oxygen/remember": True})))
                    count("asked and left")
                elif kind == "idle":
                    ws.recv(timeout=rotate_s + 60)
                    count("idle: got a message")
            except ConnectionClosed as e:
                count(f"{kind}: closed {e.rcvd.code if e.rcvd else '-'}")
            except (TimeoutError, OSError) as e:
                count(f"{kind}: {type(e).__name__}")
            finally:
                ws.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    counts["(hostile process CPU s)"] = round(time.process_time(), 1)
    out.send(counts)


# ------------------------------------------------------------------ the run
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="the chaos phase")
    p.add_argument("--baseline-s", type=float, default=120.0, help="good clients alone, before")
    p.add_argument("--after-s", type=float, default=30.0, help="good clients alone, after")
    p.add_argument("--warmup-s", type=float, default=10.0)
    p.add_argument("--good", type=int, default=4)
    p.add_argument("--hostile", type=int, default=4)
    p.add_argument("--rotate-s", type=float, default=20.0, help="a hostile client changes behaviour this often")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"hostile behaviours, from {', '.join(KINDS)}")
    p.add_argument("--idle-timeout", type=float, default=10.0)
    p.add_argument("--sample-s", type=float, default=10.0, help="server RSS sampled this often")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if not kinds or set(kinds) - set(KINDS):
        p.error(f"--kinds: some of {', '.join(KINDS)}")

    ctx = mp.get_context("spawn")
    serve_argv = ["--model", "tiny", "--inputs", "libero", "--port", "0",
                  "--max-sessions", str(args.good + args.hostile), "--idle-timeout", str(args.idle_timeout)]
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_server_main, args=(serve_argv, child), daemon=True)
    server.start()
    if not parent.poll(120):
        print("the server did not start", file=sys.stderr)
        return 1
    url = f"ws://127.0.0.1:{parent.recv()['port']}"
    print(f"oxygen serve {' '.join(serve_argv)} -> {url} (pid {server.pid})", flush=True)

    def stats() -> dict:
        parent.send("stats")
        return parent.recv()

    t0 = time.monotonic()
    rss: list[tuple[float, float, str]] = []
    phase = ["warm-up"]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            rss.append((time.monotonic() - t0, rss_mb(server.pid), phase[0]))
            sampling.wait(args.sample_s)

    stop_good = threading.Event()
    good = [Good(url, i, stop_good) for i in range(args.good)]
    for g in good:
        g.start()
    threading.Thread(target=sample, daemon=True).start()

    def rate(a: float, b: float) -> float:
        return sum(a <= t < b for g in good for t in g.chunk_times) / (b - a)

    time.sleep(args.warmup_s)
    phase[0] = "baseline"
    warm_rss = rss_mb(server.pid)
    b0, bc0 = time.monotonic(), cpu_s(server.pid)
    time.sleep(args.baseline_s)
    b1, bc1 = time.monotonic(), cpu_s(server.pid)
    closed_before = sum(len(g.closed) for g in good)

    phase[0] = "chaos"
    hostile_out, hostile_in = ctx.Pipe()
    hostile = ctx.Process(target=_hostile_main, args=(url, args.hostile, args.minutes * 60, args.rotate_s, kinds,
                                                              hostile_in),
                          daemon=True)
    c0, cc0 = time.monotonic(), cpu_s(server.pid)
    hostile.start()
    hostile.join(args.minutes * 60 + 180)
    c1, cc1 = time.monotonic(), cpu_s(server.pid)
    counts = hostile_out.recv() if hostile_out.poll(5) else {"(no report)": 1}
    if hostile.is_alive():
        hostile.kill()
    hostile_cpu = counts.pop("(hostile process CPU s)", 0.0)

    phase[0] = "after"
    time.sleep(max(args.idle_timeout, 2.0) + 2.0)   # reaping, then the good clients alone again
    a0 = time.monotonic()
    time.sleep(args.after_s)
    a1 = time.monotonic()
    after = stats()
    stop_good.set()
    for g in good:
        g.join(60)
    sampling.set()
    end_rss = rss_mb(server.pid)
    parent.close()
    server.join(20)
    if server.is_alive():
        server.kill()

    base, chaos, post = rate(b0, b1), rate(c0, c1), rate(a0, a1)
    closed = [c for g in good for c in g.closed]
    good_errors = [e for g in good for e in g.errors]
    chaos_rss = [m for _, m, ph in rss if ph == "chaos"] or [0.0]
    result = {
        "minutes": args.minutes, "good": args.good, "hostile": args.hostile, "kinds": kinds,
        "good_chunk_rate": {"baseline": base, "chaos": chaos, "after": post,
                            "chaos_over_baseline": chaos / base if base else None},
        "server_cpu_cores": {"baseline": (bc1 - bc0) / (b1 - b0), "chaos": (cc1 - cc0) / (c1 - c0)},
        "good_sessions_closed": len(closed), "good_sessions_closed_before_chaos": closed_before,
        "good_error_replies": len(good_errors),
        "hostile_outcomes": dict(sorted(counts.items())),
        "server_rss_mb": {"after_warmup": warm_rss, "chaos_peak": max(chaos_rss), "end": end_rss,
                          "peak_minus_warm": max(chaos_rss) - warm_rss,
                          "samples": [(round(t, 1), round(m, 1), ph) for t, m, ph in rss]},
        "after_hostile_left": after,
    }
    r = result["good_chunk_rate"]
    print(f"good clients' chunk rate (chunks/s, all {args.good}): baseline {base:.2f}, with {args.hostile} hostile "
          f"{chaos:.2f} (x{r['chaos_over_baseline']:.2f}), after {post:.2f}")
    result["hostile_process_cpu_cores"] = hostile_cpu / (c1 - c0)
    print(f"CPU cores used: server {result['server_cpu_cores']['baseline']:.2f} (baseline), "
          f"{result['server_cpu_cores']['chaos']:.2f} (chaos); hostile clients' process "
          f"{result['hostile_process_cpu_cores']:.2f}")
    print(f"good sessions closed: {len(closed)}{' ' + str(closed[:3]) if closed else ''}; error replies to good "
          f"clients: {len(good_errors)}{' ' + str(good_errors[:2]) if good_errors else ''}")
    print("hostile outcomes: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    m = result["server_rss_mb"]
    print(f"server RSS (MB): after warm-up {m['after_warmup']:.0f}, chaos peak {m['chaos_peak']:.0f} "
          f"({m['peak_minus_warm']:+.0f}), end {m['end']:.0f}")
    print("  over time: " + " ".join(f"{t:.0f}s:{mb:.0f}" for t, mb, _ in m["samples"]))
    good_robots = set(after.get("open_sessions", []))
    strays = ({*after.get("route_owners", []), *after.get("live_requests_by", []), *after.get("queued_by", {})}
              - good_robots)
    print(f"after the hostile ones left: sessions {after.get('open_sessions')}, text routes {after.get('routes')} "
          f"(owners {after.get('route_owners')}), live requests by {after.get('live_requests_by')}, queued "
          f"{after.get('queued_by')} (language slots {after.get('language_slots')}, KV pool "
          f"{after.get('kv_pool_free')}/{after.get('kv_pool_capacity')} slots free), TCP "
          f"connections {after.get('tcp_connections')}; held by no good client: {sorted(strays) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

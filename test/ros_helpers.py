"""Helpers for tests that run ROS 2 nodes in separate processes over real DDS.

A test module that needs ROS defines its peers as plain functions and ends with
`peer_main(globals())`-style dispatch (see `run_as_peer`). The test itself (pytest
side) never initialises rclpy: it starts every peer with `run_peers`, which waits for
all of them under one deadline and returns what each printed as its JSON result.
Inside a peer, `spin_until` replaces sleeps: it spins until a condition holds and
fails with a clear message when the peer's deadline passes.

DDS isolation comes from test/conftest.py (localhost only, random domain per
session); peers inherit it through the environment.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

TEST_DIR = Path(__file__).resolve().parent
# Parent-side limit for a whole exchange; each peer gets a little less (PEER_TIMEOUT)
# so that it can report what it was waiting for before the parent gives up on it.
DEFAULT_TIMEOUT = 30.0
PEER_TIMEOUT = 25.0
ISOLATION_VARS = ("ROS_LOCALHOST_ONLY", "ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")


def unique_name(prefix: str) -> str:
    """A node/topic name unique to this call, so even a shared domain cannot cross-talk."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------- parent side

class PeerError(AssertionError):
    """A peer failed or timed out; the message carries every peer's output."""


def peer_env() -> dict:
    env = os.environ.copy()
    missing = [name for name in ISOLATION_VARS if not env.get(name)]
    if missing:
        raise RuntimeError(f"DDS isolation variables not set (test/conftest.py): {missing}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TEST_DIR), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_peers(script, peers: dict, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Run `python SCRIPT ROLE ARG...` for each peer {label: [role, args...]} concurrently.

    Returns {label: result} where result is the JSON object a peer printed on its last
    stdout line. Raises PeerError (with all outputs) if any peer exits non-zero, prints
    no result, or is still running `timeout` seconds after the start.
    """
    env = peer_env()
    with tempfile.TemporaryDirectory(prefix="ros_peers_") as tmp:
        procs = {}
        for label, argv in peers.items():
            out = open(Path(tmp, f"{label}.out"), "w+")
            err = open(Path(tmp, f"{label}.err"), "w+")
            cmd = [sys.executable, str(script), *map(str, argv)]
            procs[label] = (subprocess.Popen(cmd, stdout=out, stderr=err, env=env,
                                             stdin=subprocess.DEVNULL), out, err)
        deadline = time.monotonic() + timeout
        timed_out = []
        for label, (proc, _, _) in procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out.append(label)
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

        def text(f):
            f.seek(0)
            return f.read()

        outputs = {label: (proc.returncode, text(out), text(err))
                   for label, (proc, out, err) in procs.items()}
        for _, out, err in procs.values():
            out.close()
            err.close()

    def report(headline):
        parts = [headline]
        for label, (rc, out, err) in outputs.items():
            parts.append(f"--- {label} (exit {rc}) stdout:\n{out.strip()}\n"
                         f"--- {label} stderr:\n{err.strip()[-4000:]}")
        return "\n".join(parts)

    if timed_out:
        raise PeerError(report(f"peer(s) {timed_out} still running after {timeout:.0f} s"))
    results = {}
    for label, (rc, out, _) in outputs.items():
        lines = out.strip().splitlines()
        if rc != 0 or not lines:
            raise PeerError(report(f"peer {label!r} failed"))
        try:
            results[label] = json.loads(lines[-1])
        except json.JSONDecodeError:
            raise PeerError(report(f"peer {label!r} printed no JSON result")) from None
    return results


# ----------------------------------------------------------------- peer side

def spin_until(node, condition, deadline: float, what: str, period: float = 0.02):
    """Spin `node` until condition() is true; TimeoutError naming `what` at `deadline`.

    `deadline` is a time.monotonic() value shared by all the waits of one peer.
    """
    import rclpy

    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        rclpy.spin_once(node, timeout_sec=period)


def call_service(node, client, request, deadline: float, what: str, attempt_s: float = 5.0):
    """Wait for the server, call it, spin until the response; retry a lost call.

    Only for idempotent services: a call that got no response within attempt_s is sent
    again (the first may have raced the discovery of the response channel).
    """
    spin_until(node, client.service_is_ready, deadline, f"service {client.service_name} ({what})")
    while True:
        future = client.call_async(request)
        attempt_end = min(deadline, time.monotonic() + attempt_s)
        try:
            spin_until(node, future.done, attempt_end, what)
            return future.result()
        except TimeoutError:
            client.remove_pending_request(future)
            if time.monotonic() > deadline:
                raise


def run_as_peer(roles: dict):
    """Entry point of a peer process: `python file.py ROLE ARG...`.

    Calls roles[ROLE](*ARGS, deadline=...) and prints its JSON-serialisable result on
    the last stdout line; exits 1 with the traceback on stderr if the role raises.
    """
    role, args = sys.argv[1], sys.argv[2:]
    deadline = time.monotonic() + PEER_TIMEOUT
    try:
        result = roles[role](*args, deadline=deadline)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    print(json.dumps(result))
    sys.stdout.flush()

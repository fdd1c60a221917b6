"""`oxygen demo` end to end with the tiny model: sim + node + recorder, a question, the report.

The bag is a real one from the recorder, so this also checks `oxygen report` on what
`oxygen record` writes from a running node.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ros_helpers import peer_env

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]


def started_pids(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("started: "))
    return {name: int(pid) for name, pid in re.findall(r"(\w+) \(pid (\d+)\)", line)}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def processes_mentioning(text: str) -> list:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append((proc.name, cmdline))
    return found


def demo(out: Path, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "oxygen_ros.cli", "demo", "--params", "config/tiny.yaml",
                             "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=peer_env())


def test_demo_runs_the_loop_answers_and_cleans_up(tmp_path):
    """Outputs exist, the bag holds chunks, narration/memory text and timing, the answer
    was printed, the report figures are sensible, and no child process is left."""
    out = tmp_path / "demo"
    proc = demo(out, "--duration", "12")
    try:
        output, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    pids = started_pids(output)
    assert set(pids) == {"sim", "recorder", "node"}, output
    assert all(gone(pid) for pid in pids.values()), (pids, output)
    assert not processes_mentioning(str(out)), processes_mentioning(str(out))
    assert "all processes ended" in output

    answer = [line for line in output.splitlines() if "answer after" in line]
    assert answer and answer[0].split(": ", 1)[1].strip(), output
    assert re.search(r"narration #1 \(frames \d+-\d+", output), output
    assert f"output folder: {out}" in output

    meta = yaml.safe_load((out / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    counts = {t["topic_metadata"]["name"]: t["message_count"] for t in meta["topics_with_message_count"]}
    assert counts["/joint_trajectory"] >= 10 and counts["/frame_timing"] >= 10, counts
    assert counts["/narration"] > 0 and counts["/memory"] > 0 and counts["/answer"] > 0, counts
    assert counts["/diagnostics"] > 0, counts

    s = json.loads((out / "summary.json").read_text())
    assert s["chunks"]["count"] == counts["/joint_trajectory"]
    assert s["chunks"]["achieved_rate_hz"] > 0 and s["chunks"]["interval_ms"]["p95"] > 0
    assert s["frames"]["count"] == counts["/frame_timing"]
    streams = s["language"]["by_stream"]
    assert streams["narration"]["done"] >= 1 and streams["answer"]["done"] == 1, streams
    done = [r for r in s["requests"] if r["done"]]
    # every frame recorded, from frame 0 on: the demo activates the node only once the
    # recorder matched all its publishers (DDS matches topic by topic)
    from oxygen_ros.tools.bag_read import read_bag

    assert read_bag(out / "bag").frames[0].index == 0, "the bag misses the first frames' timing"
    assert done and all(r["frames_to_done"] >= 0 and r["seconds_to_done"] > 0 for r in done), done
    assert (out / "timeline.png").stat().st_size > 20_000
    assert "timing summary:" in (out / "demo.txt").read_text()
    assert {p.name for p in (out / "logs").iterdir()} == {"sim.log", "recorder.log", "node.log"}


def test_fleet_demo_serves_each_robot_in_its_namespace(tmp_path):
    """`--robots 2`: one node serves two simulated robots; each robot's sim, recorder, bag,
    text, answer and report are its own, and every process ends."""
    out = tmp_path / "fleet"
    proc = demo(out, "--robots", "2", "--duration", "12", "--no-record-cameras")
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    robots = ["robot1", "robot2"]
    pids = started_pids(output)
    assert set(pids) == {"node", *(f"{kind}_{r}" for r in robots for kind in ("sim", "recorder"))}, output
    assert all(gone(pid) for pid in pids.values()), (pids, output)
    assert "fleet of 2 robots" in output, output
    for r in robots:
        answer = [line for line in output.splitlines() if f"{r} answer after" in line]
        assert answer and answer[0].split(": ", 1)[1].strip(), output
        assert re.search(rf"{r} narration #1 \(frames \d+-\d+", output), output
        meta = yaml.safe_load((out / r / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
        counts = {t["topic_metadata"]["name"]: t["message_count"] for t in meta["topics_with_message_count"]}
        assert counts[f"/{r}/joint_trajectory"] >= 10 and counts[f"/{r}/narration"] > 0, counts
        assert not [t for t in counts if t.startswith("/robot") and not t.startswith(f"/{r}/")], counts
        s = json.loads((out / r / "summary.json").read_text())
        assert s["chunks"]["count"] == counts[f"/{r}/joint_trajectory"]
        assert s["language"]["by_stream"]["answer"]["done"] == 1


@pytest.mark.stress                    # part of the stress suite; here for this file's process helpers
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_demo_stopped_by_a_signal_stops_every_process_and_closes_the_bag(sig, tmp_path):
    """Ctrl-C (SIGINT) or a `kill` (SIGTERM) mid-run: exit 130, no child left, bag closed."""
    out = tmp_path / "demo"
    proc = demo(out, "--duration", "120")
    lines = []
    try:
        end = time.monotonic() + 90
        for line in proc.stdout:
            lines.append(line)
            if "first action chunk" in line or time.monotonic() > end:
                break
        time.sleep(1.0)
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + rest
    assert proc.returncode == 130, output
    assert f"interrupted ({sig.name})" in output
    assert all(gone(pid) for pid in started_pids(output).values()), output
    assert not processes_mentioning(str(out))
    assert (out / "bag" / "metadata.yaml").is_file(), output
    assert (out / "summary.json").is_file()

"""oxygen_node (tiny profile) survives faults of the processes around it, over real DDS:

- the camera publisher, the joint-state publisher, and the simulated robot (`oxygen sim`,
  both at once) die (SIGKILL: their participants vanish) and come back as new processes:
  while they are gone no chunk comes from their last inputs, /diagnostics names each
  missing input as stale, and chunks resume by themselves when they return;
- `oxygen record` is stopped (SIGINT) mid-run and a new one started: both bags read back,
  the second holds chunks, and the chunks never stopped meanwhile;
- the ROS clock (use_sim_time, inputs stamped on /clock's time too) jumps forward, then
  back: the node names each jump, publishes no chunk stamped on the time line it left,
  and resumes on the new one;
- questions asked all along, faults included, each get an answer or a refusal with its
  reason within their timeout; those asked during a fault are refused at once, naming it.

"Not from stale inputs" is checked on the chunks' header stamps (the observation's time,
frame_publisher.py) against the ROS times at which an input process died and returned;
bounds count control ticks (tiny.yaml's rate and max_observation_age_s) instead of
timing them. Run by pytest; this file is also the peer program (scenario and inputs).
"""

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node_harness import ROOT, node_processes, tiny_params
from ros_helpers import run_as_peer, run_peers

pytestmark = pytest.mark.ros

ERROR = 2
PARAMS = tiny_params()
RATE_HZ, MAX_AGE_S = PARAMS["control_rate_hz"], PARAMS["max_observation_age_s"]
# Chunks a node that honours max_observation_age_s may still publish from a dead process's
# last inputs: one per tick within max_age of its last message (ticks never burst:
# tick_clock.py), plus the frame in flight at the kill and its delivery.
LATE_CHUNKS = math.floor(MAX_AGE_S * RATE_HZ) + 1 + 2
# Ticks without a chunk a fault lasts before its input returns: a node that published from
# stale inputs would publish about this many more chunks than LATE_CHUNKS allows.
STALL_TICKS = 2 * LATE_CHUNKS
IN_FLIGHT = 2                   # chunks published before the node saw a clock jump
ASK_EVERY_S = 0.4
ASK_TIMEOUT_S = 3.0
RESPONSE_SLACK_S = 1.5          # a reply sent at the timeout still has to cross DDS
IMAGE_SIZE = 64                 # `oxygen sim`'s are square; the node keeps a camera's first size
SIM_T0, JUMP_S = 1000.0, 5.0    # /clock starts at SIM_T0; jumps +JUMP_S, then -6 * JUMP_S


def _secs(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


# ----------------------------------------------------------------- peers

def play(namespace, inputs, clock, *, deadline):
    """Publish `inputs` (cameras, joints or both, comma-separated) until the scenario that
    started this process kills it or itself ends; clock "sim": stamped on /clock's time."""
    from node_driver import Driver

    parent = os.getppid()
    d = Driver(namespace, plays=inputs.split(","), use_sim_time=clock == "sim",
               image_shape=(IMAGE_SIZE, IMAGE_SIZE))
    while os.getppid() == parent:         # an orphan (scenario gone) stops by itself
        time.sleep(0.2)
    d.close()
    return {}


class SimClock:
    """/clock at 50 Hz, one sim second per real second, moved by jump(); published_at: when
    the moved time went out (the executor may publish it late on a loaded machine)."""

    def __init__(self, node):
        from builtin_interfaces.msg import Time
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rosgraph_msgs.msg import Clock

        self.t, self.published_at = SIM_T0, None
        pub = node.create_publisher(Clock, "/clock",
                                    QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))

        def tick():
            self.t += 0.02
            pub.publish(Clock(clock=Time(sec=int(self.t), nanosec=int(self.t % 1 * 1e9))))
            if self.published_at is None:
                self.published_at = time.monotonic()

        node.create_timer(0.02, tick)

    def jump(self, by_s: float) -> float:
        """Move the time by by_s; returns the new time, the first the new time line has."""
        self.published_at = None
        self.t += by_s
        return self.t


class Observer:
    """The scenario's side: records what the node publishes (a Driver that plays no input),
    starts, kills and restarts the processes around the node, and keeps asking questions."""

    def __init__(self, namespace, workdir, sim_clock=False):
        from node_driver import Driver

        self.d = Driver(namespace, plays=())
        self.ns, self.workdir = namespace, Path(workdir)
        self.clock = SimClock(self.d.node) if sim_clock else None
        self.procs, self.events, self.asked = {}, {}, []
        self._next_ask = 0.0

    def ros_now(self) -> float:
        return self.clock.t if self.clock else self.d.node.get_clock().now().nanoseconds / 1e9

    def mark(self, event: str) -> None:
        self.events[event] = (time.monotonic(), self.ros_now())

    def wait(self, condition, timeout: float, what: str) -> None:
        """Wait for condition(), asking a question every ASK_EVERY_S meanwhile (from the first
        chunk on: before it, the node may still be loading its model)."""
        end = time.monotonic() + timeout
        while not condition():
            now = time.monotonic()
            if now >= self._next_ask and self.d.chunks:
                self._ask()
                self._next_ask = now + ASK_EVERY_S
            if now > end:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.02)

    def _ask(self) -> None:
        if not self.asked:       # the Driver's first call probes the service first: not timed
            self.d.ask_async("")
        entry = {"sent": time.monotonic(), "done": None}
        entry["future"] = f = self.d.ask_async("what have you done?", timeout_s=ASK_TIMEOUT_S)
        f.add_done_callback(lambda _f: entry.update(done=time.monotonic()))
        self.asked.append(entry)

    def start(self, name: str, argv: list) -> None:
        n = sum(1 for k in self.events if k.startswith(f"{name} started"))
        self.mark(f"{name} started {n}")
        log = open(self.workdir / f"{name}.{n}.log", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=ROOT)

    def play(self, name: str, inputs: str, clock: str = "wall") -> None:
        self.start(name, [sys.executable, __file__, "play", self.ns, inputs, clock])

    def kill(self, name: str) -> None:
        """SIGKILL: the process dies without a goodbye; marked once it is gone."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait(timeout=20)
        self.mark(f"{name} gone")

    def chunks(self, since_ros: float = -math.inf) -> list:
        """[receive monotonic time, header stamp] of every chunk stamped at or after since_ros."""
        stamped = [(t, _secs(m.header.stamp)) for t, m in list(self.d.chunks)]
        return [[t, s] for t, s in stamped if s >= since_ros]

    def loop_value(self, key: str) -> int:
        return int(self.d.diag_values.get("control loop", {}).get(key, 0))

    def diags(self, since: float, status: str) -> list:
        return [[level, msg] for level, msg in self.d.diag_messages(since, status)]

    def close(self) -> dict:
        """Kill what is left, wait for every question's response (or its deadline), and
        return what was recorded (once; later calls do nothing)."""
        if not self.d.node.context.ok():
            return {}
        for proc in self.procs.values():
            proc.kill()
            proc.wait()
        end = max((q["sent"] for q in self.asked), default=0.0) + ASK_TIMEOUT_S + RESPONSE_SLACK_S
        self.d.wait_until(lambda: all(q["future"].done() for q in self.asked) or time.monotonic() > end,
                          ASK_TIMEOUT_S + RESPONSE_SLACK_S + 5, "the questions' responses")
        questions = []
        for q in self.asked:
            r = q["future"].result() if q["future"].done() else None
            questions.append({"sent": q["sent"], "took": q["done"] - q["sent"] if q["done"] else None,
                              "success": r.success if r else None, "error": r.error if r else None})
        out = {"events": self.events, "chunks": self.chunks(), "questions": questions}
        self.d.close()
        return out


def _victims(ns: str, victim: str) -> list:
    """The node's input topics a victim process publishes."""
    from node_driver import CAMERA_TOPICS

    cameras, joints = [f"{ns}/{t}" for t in CAMERA_TOPICS], [f"{ns}/joint_states"]
    return {"cameras": cameras, "joints": joints, "sim": cameras + joints}[victim]


def _start_victim(o: Observer, victim: str) -> None:
    if victim == "sim":
        o.start("sim", [sys.executable, "-m", "oxygen_ros.cli", "sim", "--params", "config/tiny.yaml",
                        "--namespace", o.ns, "--image-size", str(IMAGE_SIZE), "--quiet"])
    else:
        o.play(victim, victim)


def input_fault(namespace, victim, workdir, *, deadline):
    """victim (cameras | joints | sim) dies after a few chunks; it is restarted once the node
    has reported it stale and gone STALL_TICKS ticks without a chunk."""
    o = Observer(namespace, workdir)
    try:
        if victim != "sim":             # the input that survives, in its own process
            o.play("other", "joints" if victim == "cameras" else "cameras")
        _start_victim(o, victim)
        t0 = o.ros_now()
        o.wait(lambda: len(o.chunks(t0)) >= 5, 60, "five chunks from fresh inputs")
        o.kill(victim)
        gone_mono = o.events[f"{victim} gone"][0]
        names = _victims(namespace, victim)

        def diagnosed():
            msgs = [msg for level, msg in o.diags(gone_mono, "inputs") if level == ERROR]
            return any(all(f"{n}: stale" in msg for n in names) for msg in msgs)

        o.wait(diagnosed, 30, f"/diagnostics naming {names} stale")
        o.mark("diagnosed")
        ticks = o.loop_value("ticks_without_chunk")
        o.wait(lambda: o.loop_value("ticks_without_chunk") >= ticks + STALL_TICKS, 30,
               f"{STALL_TICKS} more ticks without a chunk")
        _start_victim(o, victim)
        restart_ros = o.events[f"{victim} started 1"][1]
        o.wait(lambda: len(o.chunks(restart_ros)) >= 3, 60, "three chunks after the restart")
        o.mark("resumed")
        return {**o.close(), "inputs": o.diags(gone_mono, "inputs"),
                "loop": o.diags(gone_mono, "control loop"), "names": names}
    finally:
        o.close()


def recorder_swap(namespace, workdir, *, deadline):
    """`oxygen record` stopped with SIGINT after six chunks, then a second one: two bags."""
    from test_record import Recorder

    from oxygen_ros.tools.bag_recorder import BagRecorder

    o = Observer(namespace, workdir)
    try:
        o.play("inputs", "cameras,joints")
        # the node publishes (and the recorder can match it) once it has loaded: run alone, this
        # test is the module's first and the node may still be starting
        o.wait(lambda: o.d.chunks, 120, "the node's first chunk")
        outputs = []
        for i in range(2):
            rec = Recorder(o.workdir / f"bag{i}", namespace, "--params", str(ROOT / "config" / "tiny.yaml"))
            o.procs["recorder"] = rec.proc          # killed by close() if the scenario fails
            try:
                o.wait(lambda: any(BagRecorder.MATCHED in line for line in list(rec.lines)), 30,
                       f"recorder {i} matching the node's publishers")
            except TimeoutError as e:
                raise TimeoutError(f"{e}; the recorder printed:\n{''.join(rec.lines)}") from None
            o.mark(f"recorder {i} matched")
            t = o.ros_now()         # chunks stamped after this were published to a matched recorder
            o.wait(lambda: len(o.chunks(t)) >= 6, 30, f"six chunks while recorder {i} runs")
            o.mark(f"recorder {i} stopping")
            o.events[f"recorder {i} saw"] = [s for _, s in o.chunks(t)]
            outputs.append(rec.stop(signal.SIGINT))
            del o.procs["recorder"]
        return {**o.close(), "outputs": outputs, "bags": [str(o.workdir / f"bag{i}") for i in range(2)]}
    finally:
        o.close()


def clock_jumps(namespace, workdir, *, deadline):
    """/clock (and the inputs' stamps with it) jumps JUMP_S forward, then 6 * JUMP_S back:
    three epochs of stamps that do not overlap (the last one stays below SIM_T0)."""
    o = Observer(namespace, workdir, sim_clock=True)
    try:
        o.play("inputs", "cameras,joints", "sim")
        o.wait(lambda: len(o.chunks(SIM_T0)) >= 5, 60, "five chunks on sim time")
        for jump, by in (("forward", JUMP_S), ("back", -6 * JUMP_S)):
            at_ros = o.clock.jump(by)
            o.wait(lambda: o.clock.published_at is not None, 10, f"the {jump} jump on /clock")
            at_mono = o.clock.published_at
            o.events[jump] = (at_mono, at_ros)
            o.wait(lambda: any(f"jumped {jump}" in msg for _, msg in o.diags(at_mono, "inputs")), 30,
                   f"/diagnostics naming the {jump} jump")
            o.wait(lambda: len([c for c in o.chunks(at_ros) if c[0] > at_mono and c[1] < at_ros + 10]) >= 3,
                   30, f"three chunks after the {jump} jump, on the new time line")
            o.mark(f"resumed {jump}")
        return {**o.close(), "inputs": o.diags(0.0, "inputs")}
    finally:
        o.close()


# ----------------------------------------------------------------- checks (pytest side)

def _check_questions(r: dict, fault: tuple = (math.inf, math.inf), reason_names: tuple = ()) -> None:
    """Every question got a response within its timeout (+ DDS slack), none lost; every
    failure says why; those asked while a fault was diagnosed were refused at once, naming it."""
    qs = r["questions"]
    assert qs, "no question was asked"
    for q in qs:
        assert q["took"] is not None and q["took"] <= ASK_TIMEOUT_S + RESPONSE_SLACK_S, q
        assert q["success"] or q["error"], q
    during = [q for q in qs if fault[0] <= q["sent"] <= fault[1]]
    assert during or not reason_names, (fault, qs)
    for q in during:
        assert not q["success"] and q["took"] < ASK_TIMEOUT_S, q
        assert any(n in q["error"] for n in reason_names), q
    # accepted before a fault, an answer can miss its deadline: the reply then says why
    timed_out = [q for q in qs if not q["success"] and q["error"].startswith("timed out")]
    assert all("at admission: " in q["error"] and "now: " in q["error"] for q in timed_out), timed_out
    print(f"{len(qs)} questions: {sum(q['success'] for q in qs)} answered, "
          f"{sum(not q['success'] for q in qs)} refused ({len(during)} during the fault, "
          f"{len(timed_out)} timed out after acceptance, with the reason)")


def _check_input_fault(r: dict, victim: str) -> None:
    ev = r["events"]
    gone_mono, gone_ros = ev[f"{victim} gone"]
    restart_mono, restart_ros = ev[f"{victim} started 1"]
    chunks = r["chunks"]
    late = [c for c in chunks if c[0] > gone_mono and c[1] <= gone_ros]       # from the last inputs
    assert len(late) <= LATE_CHUNKS, (late, gone_mono, gone_ros)
    assert not [c for c in chunks if gone_ros < c[1] < restart_ros], "a chunk without the victim's inputs"
    assert len([c for c in chunks if c[1] >= restart_ros]) >= 3
    errors = {status: [msg for level, msg in r[status] if level == ERROR] for status in ("inputs", "loop")}
    for name in r["names"]:
        assert any(f"{name}: stale" in msg for msg in errors["inputs"]), (name, r["inputs"])
    assert any("no action chunk" in msg and "stale" in msg for msg in errors["loop"]), r["loop"]
    _check_questions(r, (ev["diagnosed"][0], restart_mono), r["names"])
    print(f"{victim}: {len(late)} chunk(s) from the last inputs after the kill (<= {LATE_CHUNKS}), "
          f"resumed {ev['resumed'][0] - restart_mono:.1f} s after the restart")


# ----------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def node():
    """One node for the faults of this module: it must survive them all in turn."""
    with node_processes() as start:
        yield start(autostart=True)


@pytest.mark.parametrize("victim", ["cameras", "joints", "sim"])
def test_input_process_dies_and_returns(node, victim, tmp_path):
    """The process publishing the cameras, the joint states, or both (`oxygen sim`) is
    killed and started again: no chunk from its last inputs beyond the ticks within
    max_observation_age_s, none without it, /diagnostics names every missing input stale,
    chunks resume with the new process, and questions are answered or refused with why."""
    r = run_peers(__file__, {"observer": ["input_fault", node.namespace, victim, tmp_path]},
                  timeout=150)["observer"]
    _check_input_fault(r, victim)
    assert node.alive()
    assert "Traceback" not in node.log()


def test_recorder_stopped_mid_run_and_restarted(node, tmp_path):
    """`oxygen record` gets SIGINT mid-run (exit 0, "bag closed") and a new one starts:
    both bags read back whole with rosbags, each holds the chunks published while it was
    matched, and the node kept publishing chunks through the swap."""
    from rosbags.highlevel import AnyReader

    from oxygen_ros.tools.bag_types import typestore

    pid = node.proc.pid
    r = run_peers(__file__, {"observer": ["recorder_swap", node.namespace, tmp_path]},
                  timeout=150)["observer"]
    for out in r["outputs"]:
        assert "bag closed" in out, out
    topic = f"{node.namespace}/joint_trajectory"
    for i, bag in enumerate(r["bags"]):
        with AnyReader([Path(bag)], default_typestore=typestore()) as reader:
            msgs = [(c.topic, reader.deserialize(raw, c.msgtype)) for c, _, raw in reader.messages()]
        stamps = {_secs(m.header.stamp) for t, m in msgs if t == topic}
        # every chunk the observer got while this recorder ran, but the newest: the SIGINT went
        # out as it arrived, and DDS need not have delivered it to the recorder yet
        saw = r["events"][f"recorder {i} saw"]
        missing = [s for s in saw[:-1] if s not in stamps]
        assert not missing, (i, missing, sorted(stamps), r["outputs"][i])
    swap = (r["events"]["recorder 0 stopping"][0], r["events"]["recorder 1 matched"][0])
    assert [c for c in r["chunks"] if swap[0] < c[0] < swap[1]], "no chunk while the recorders swapped"
    _check_questions(r)
    assert node.alive() and node.proc.pid == pid
    assert "inactive" not in node.log() and "Traceback" not in node.log()


def test_ros_clock_jumps_forward_and_back(tmp_path):
    """With use_sim_time and inputs stamped on /clock's time, the clock jumps 5 s forward,
    then 30 s back: the node keeps running, names each jump in /diagnostics, publishes no
    chunk stamped on a time line it left (beyond those in flight when it jumped), and
    resumes on the new one; questions meanwhile are answered or refused with why."""
    with node_processes() as start:
        node = start(autostart=True, use_sim_time=True)
        r = run_peers(__file__, {"observer": ["clock_jumps", node.namespace, tmp_path]},
                      timeout=150)["observer"]
        log = node.log()
        assert node.alive()
    ev, chunks = r["events"], r["chunks"]
    (f_mono, f_ros), (b_mono, _) = ev["forward"], ev["back"]
    left_behind = [c for c in chunks if f_mono < c[0] < b_mono and c[1] < f_ros]      # stamped before +5 s
    assert len(left_behind) <= IN_FLIGHT, left_behind
    from_future = [c for c in chunks if c[0] > b_mono and c[1] >= SIM_T0]             # stamped before -30 s
    assert len(from_future) <= IN_FLIGHT, from_future
    print(f"clock jumps: {len(left_behind)} and {len(from_future)} chunk(s) in flight on the old time line")
    for jump in ("forward", "back"):
        assert any(level == ERROR and f"ROS time jumped {jump}" in m for level, m in r["inputs"]), r["inputs"]
    _check_questions(r)
    assert "Traceback" not in log


if __name__ == "__main__":
    run_as_peer({"play": play, "input_fault": input_fault, "recorder_swap": recorder_swap,
                 "clock_jumps": clock_jumps})

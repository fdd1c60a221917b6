"""The test driver of oxygen_node, run inside a peer process (ros_helpers.run_as_peer).

It plays the robot (three cameras at 20 Hz, joint states at 50 Hz, each switchable to
"off" or to a kind of bad message), records everything the node publishes, and drives
the node's lifecycle, parameters and ask_progress service. Its executor spins in a
background thread; the scenario in the main thread waits with `wait_until`/`sleep`.
"""

import threading
import time

import numpy as np

from ros_helpers import unique_name

CAMERA_TOPICS = ["camera/base/image_raw", "camera/left_wrist/image_raw", "camera/right_wrist/image_raw"]
JOINTS = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "joint_7", "gripper"]
PERIOD_S = 0.1   # config/tiny.yaml: control_rate_hz 10


class Driver:
    def __init__(self, namespace: str, image_hz: float = 20.0, joint_hz: float = 50.0, cameras=None,
                 trajectory_topics=(), plays=("cameras", "joints"), use_sim_time: bool = False,
                 image_shape=(48, 64), fleet_node: str = "", joints=JOINTS):
        """cameras: [(topic, message class, first message)] instead of CAMERA_TOPICS with
        random sensor_msgs/Image; the scenario may then set good_images[i], what camera i sends.
        trajectory_topics: further JointTrajectory topics to record (relative to the
        namespace) into expert_chunks[topic]. plays: the inputs this driver publishes (the
        others start "off": a test may run cameras and joint states in separate processes);
        use_sim_time: stamp them on /clock's time, as a simulator or a played bag does;
        image_shape: (height, width) of the images (the node keeps a camera's first size);
        fleet_node: the full name of a fleet node that serves this robot (namespace /ROBOT):
        its lifecycle and parameters are that node's, its statuses on /diagnostics are
        FLEET_NODE/ROBOT's, and its questions go to NAMESPACE/ask_progress; joints: the
        names its joint states carry (JOINTS's limits)."""
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState, GetState
        from oxygen_msgs.msg import FrameTiming, TextChunk
        from oxygen_msgs.srv import AskProgress
        from rcl_interfaces.srv import SetParameters
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter import Parameter
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import Image, JointState
        from trajectory_msgs.msg import JointTrajectory

        from oxygen_ros.node.convert import rgb_to_image

        rclpy.init()
        self.rclpy = rclpy
        self.ns, self.fqn = namespace, fleet_node or f"{namespace}/oxygen_node"
        self.joints = list(joints)
        self.status_prefix = f"{fleet_node}{namespace}" if fleet_node else self.fqn
        self.node = node = rclpy.create_node(unique_name("oxygen_test_driver"), parameter_overrides=[
            Parameter("use_sim_time", value=use_sim_time)])
        self.lock = threading.Lock()
        # -- the robot
        self.mode = {i: "good" if "cameras" in plays else "off" for i in range(len(cameras or CAMERA_TOPICS))}
        self.mode["joints"] = "good" if "joints" in plays else "off"
        rng = np.random.default_rng(0)
        self.good_images = [rgb_to_image(rng.integers(0, 256, (*image_shape, 3), dtype=np.uint8), enc)
                            for enc in ("rgb8", "bgr8", "mono8")]
        if cameras is None:
            cameras = [(t, Image, img) for t, img in zip(CAMERA_TOPICS, self.good_images)]
        self.good_images = [img for _, _, img in cameras]
        self._Image, self._JointState = Image, JointState
        self.stamp = None        # a builtin_interfaces Time: every input stamped with it (a paused sim)
        self.image_pubs = [node.create_publisher(kind, f"{namespace}/{t}", qos_profile_sensor_data)
                           for t, kind, _ in cameras]
        self.joint_pub = node.create_publisher(JointState, f"{namespace}/joint_states",
                                               qos_profile_sensor_data)
        node.create_timer(1.0 / image_hz, self._publish_images)
        node.create_timer(1.0 / joint_hz, self._publish_joints)
        # -- recorders
        self.chunks, self.timings, self.text, self.diags = [], [], [], []
        self.diag_values = {}            # the latest /diagnostics values, by status
        reliable = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(JointTrajectory, f"{namespace}/joint_trajectory",
                                 lambda m: self.chunks.append((time.monotonic(), m)), reliable)
        self.expert_chunks = {t: [] for t in trajectory_topics}
        for t in trajectory_topics:
            node.create_subscription(JointTrajectory, f"{namespace}/{t}",
                                     lambda m, t=t: self.expert_chunks[t].append((time.monotonic(), m)), reliable)
        node.create_subscription(FrameTiming, f"{namespace}/frame_timing",
                                 lambda m: self.timings.append((time.monotonic(), m)), reliable)
        for stream in ("narration", "memory", "answer"):
            node.create_subscription(TextChunk, f"{namespace}/{stream}",
                                     lambda m, s=stream: self.text.append((s, m)), reliable)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, reliable)
        # -- clients
        base = self.fqn
        self.change_client = node.create_client(ChangeState, f"{base}/change_state")
        self.get_client = node.create_client(GetState, f"{base}/get_state")
        self.param_client = node.create_client(SetParameters, f"{base}/set_parameters")
        self.ask_client = node.create_client(AskProgress, f"{namespace if fleet_node else base}/ask_progress")
        self._change_answered = self._ask_answered = False    # see transition() and ask_async()
        self._types = dict(ChangeState=ChangeState, GetState=GetState, SetParameters=SetParameters,
                           AskProgress=AskProgress)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(node)
        self._spinner = threading.Thread(target=self._spin, daemon=True)
        self._spinner.start()

    def _spin(self):
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - context shut down at close()
            pass

    def close(self):
        self.executor.shutdown(timeout_sec=2.0)
        self._spinner.join(timeout=2.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown()

    # -- the robot -----------------------------------------------------------------------
    def _stamp(self):
        return self.stamp if self.stamp is not None else self.node.get_clock().now().to_msg()

    def _publish_images(self):
        stamp = self._stamp()
        for i, pub in enumerate(self.image_pubs):
            mode = self.mode[i]
            if mode == "off":
                continue
            msg = self._bad_image(mode) if mode != "good" else self.good_images[i]
            msg.header.stamp = stamp
            pub.publish(msg)

    def _bad_image(self, mode):
        msg = self._Image()
        good = self.good_images[0]
        msg.height, msg.width, msg.step, msg.encoding = good.height, good.width, good.step, good.encoding
        msg.data = good.data
        if mode == "bad_encoding":
            msg.encoding = "yuv422"
        elif mode == "wrong_size":
            msg.data = bytes(good.step * (good.height - 1))   # one row short
        elif mode == "empty":
            msg.height = msg.width = msg.step = 0
            msg.data = b""
        else:
            raise ValueError(mode)
        return msg

    def _publish_joints(self):
        mode = self.mode["joints"]
        if mode == "off":
            return
        names = list(reversed(self.joints))       # any order: matched by name
        pos = [0.1 * i for i in range(len(names))]
        pos[-1] = 0.04                            # joint_1 ... gripper within limits
        if mode == "nan":
            pos[2] = float("nan")
        elif mode == "inf":
            pos[3] = float("inf")
        elif mode == "missing":
            names, pos = names[1:], pos[1:]       # no gripper
        msg = self._JointState(name=names, position=pos)
        msg.header.stamp = self._stamp()
        self.joint_pub.publish(msg)

    def _on_diagnostics(self, arr):
        statuses = {s.name.split(": ", 1)[1]: (int.from_bytes(s.level, "little") if isinstance(s.level, bytes)
                                              else int(s.level), s.message)
                    for s in arr.status if s.name.startswith(self.status_prefix + ": ")}
        if statuses:             # values first: a message in diags has its values in diag_values
            self.diag_values = {s.name.split(": ", 1)[1]: {kv.key: kv.value for kv in s.values}
                                for s in arr.status if s.name.startswith(self.status_prefix + ": ")}
            self.diags.append((time.monotonic(), statuses))

    # -- waiting ---------------------------------------------------------------------------
    @staticmethod
    def wait_until(condition, timeout: float, what: str, period: float = 0.02):
        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                raise TimeoutError(f"timed out after {timeout:.1f} s waiting for {what}")
            time.sleep(period)

    def call(self, client, request, timeout: float, what: str, attempt_s: float = 4.0):
        """Call and wait for the response; one without a response after attempt_s is resent.

        Fast DDS drops a response when the server has not yet matched the client's response
        reader ("failed to send response (timeout)" in the node's log): a first call can
        race discovery even after service_is_ready. Only idempotent requests go here.
        """
        end = time.monotonic() + timeout
        self.wait_until(client.service_is_ready, timeout, f"service {client.srv_name} ({what})")
        while True:
            future = client.call_async(request)
            try:
                self.wait_until(future.done, max(0.0, min(attempt_s, end - time.monotonic())), what)
                return future.result()
            except TimeoutError:
                client.remove_pending_request(future)
                if time.monotonic() >= end:
                    raise

    # -- lifecycle, parameters, questions ------------------------------------------------
    def state(self, timeout: float = 10.0) -> str:
        return self.call(self.get_client, self._types["GetState"].Request(), timeout,
                          "GetState").current_state.label

    def transition(self, label: str, timeout: float = 20.0) -> bool:
        """A transition is not idempotent, so it is sent once, after an unknown transition
        (refused by the node, no side effect) got a response: the response channel works."""
        ChangeState = self._types["ChangeState"]
        if not self._change_answered:
            probe = ChangeState.Request()
            probe.transition.label = "no_such_transition"
            self.call(self.change_client, probe, timeout, "a probe transition")
            self._change_answered = True
        req = ChangeState.Request()
        req.transition.label = label
        return self.call(self.change_client, req, timeout, f"the {label} transition",
                          attempt_s=timeout).success

    def set_param(self, name: str, value, timeout: float = 10.0):
        from rclpy.parameter import Parameter

        req = self._types["SetParameters"].Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        r = self.call(self.param_client, req, timeout, f"setting {name}").results[0]
        return r.successful, r.reason

    def ask_async(self, question: str, timeout_s: float = 0.0):
        if not self._ask_answered:     # an empty question is refused at once: a safe probe
            self.call(self.ask_client, self._types["AskProgress"].Request(question=""), 10.0,
                       "a probe question")
            self._ask_answered = True
        req = self._types["AskProgress"].Request(question=question, timeout_s=timeout_s)
        return self.ask_client.call_async(req)

    def ask(self, question: str, timeout_s: float = 0.0, wait: float = 20.0) -> dict:
        future = self.ask_async(question, timeout_s)
        self.wait_until(future.done, wait, f"the answer to {question[:40]!r}")
        r = future.result()
        return {"success": r.success, "answer": r.answer, "error": r.error, "latency_s": r.latency_s}

    # -- summaries (JSON-friendly) ---------------------------------------------------------
    def chunk_times(self, since: float = 0.0) -> list:
        return [t for t, _ in list(self.chunks) if t >= since]

    def chunks_since(self, since: float) -> int:
        return len(self.chunk_times(since))

    def diag_values_after(self, since: float, status: str, margin: float = 0.3,
                          timeout: float = 10.0) -> dict:
        """The values of `status` from a /diagnostics message received more than `margin`
        seconds after `since` (monotonic): counters that cover everything published before."""
        self.wait_until(lambda: self.diags and self.diags[-1][0] > since + margin, timeout,
                        "a /diagnostics message")
        return self.diag_values.get(status, {})

    def diag_messages(self, since: float, status: str) -> list:
        return [(s[status][0], s[status][1]) for t, s in list(self.diags) if t >= since and status in s]

    def text_requests(self) -> list:
        """Per request: stream, concatenated deltas, full_text, done, chunk count."""
        reqs = {}
        for stream, m in list(self.text):
            r = reqs.setdefault(m.request_id, {"id": m.request_id, "stream": stream, "concat": "",
                                               "full_text": "", "done": False, "chunks": 0,
                                               "token_counts": []})
            r["concat"] += m.delta
            r["chunks"] += 1
            r["token_counts"].append(m.token_count)
            if m.done:
                r["done"], r["full_text"] = True, m.full_text
        return list(reqs.values())


def sleep(seconds: float):
    time.sleep(seconds)

"""Test harness for oxygen_node: the node runs in its own process (started like a user
would, `python -m oxygen_ros.node --ros-args --params-file ...`), in a namespace unique
to the test; a driver peer (see node_driver.py) talks to it over real DDS.

DDS isolation comes from test/conftest.py (localhost only, random domain per session);
the node process inherits it through the environment.
"""

import contextlib
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from ros_helpers import peer_env

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "config" / "tiny.yaml"


def tiny_params(**overrides) -> dict:
    """The parameters of config/tiny.yaml with `overrides` applied."""
    params = yaml.safe_load(TINY_YAML.read_text())["/**"]["ros__parameters"]
    params.update(overrides)
    return params


class NodeProcess:
    """One oxygen_node process; `stop()` ends it (SIGINT, then SIGKILL) and returns its log."""

    def __init__(self, params: dict, workdir: Path, script: Path | None = None, env: dict | None = None):
        self.namespace = f"/t_{uuid.uuid4().hex[:8]}"
        self.name = f"{self.namespace}/oxygen_node"
        self.params_file = workdir / "params.yaml"
        self.params_file.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
        self.log_path = workdir / "node.log"
        self._log = open(self.log_path, "w")
        # script: a program that starts the node its own way (e.g. a toy-sized profile)
        program = [str(script)] if script is not None else ["-m", "oxygen_ros.node"]
        cmd = [sys.executable, *program, "--ros-args",
               "--params-file", str(self.params_file), "-r", f"__ns:={self.namespace}"]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**peer_env(), **(env or {})}, cwd=ROOT)
        self.exit_code = None

    def topic(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.exit_code = self.proc.returncode
        return self.exit_code


@contextlib.contextmanager
def node_processes():
    """Yields start(**param_overrides) -> NodeProcess; on exit every node started is
    stopped (also when the body raised) and its log printed (pytest shows it on failure)."""
    started = []
    with tempfile.TemporaryDirectory(prefix="oxygen_node_") as tmp:
        def start(script=None, env=None, **overrides) -> NodeProcess:
            workdir = Path(tmp, str(len(started)))
            workdir.mkdir()
            node = NodeProcess(tiny_params(**overrides), workdir, script, env)
            started.append(node)
            return node

        try:
            yield start
        finally:
            for node in started:
                node.stop()
                sys.stdout.write(f"\n--- {node.name} log (exit {node.exit_code}, last 4000 chars) ---\n"
                                 f"{node.log()[-4000:]}\n")


@pytest.fixture
def start_node():
    """start_node(**param_overrides) -> NodeProcess, stopped at teardown."""
    with node_processes() as start:
        yield start

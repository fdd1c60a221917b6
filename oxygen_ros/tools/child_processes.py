"""Child processes that are always cleaned up: each in its own session, output to a log.

Own sessions keep a terminal's Ctrl-C away from the children, so the parent decides the
order of shutdown (e.g. the node before the recorder, so the bag gets its last messages).
`stop` sends SIGINT, then SIGTERM, then SIGKILL to the child's process group, waiting
between steps; `stop_all` does so for every child, in the given order.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

RCL_LOOPBACK_NOTICES = ("ROS_LOCALHOST_ONLY is deprecated", "'localhost_only' is enabled")


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_s(self) -> float | None:
        """CPU seconds the child has used so far (user + system, all its threads; Linux
        /proc), None once it has gone."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime, stime

    def log_tail(self, chars: int = 3000) -> str:
        """The log's last `chars` characters, without rcl's notices about the loopback
        settings every child gets (ROS_LOCALHOST_ONLY beside ROS_AUTOMATIC_DISCOVERY_RANGE)."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        lines = [line for line in text.splitlines(keepends=True) if not any(n in line for n in RCL_LOOPBACK_NOTICES)]
        return "".join(lines)[-chars:]

    def has_line(self, prefix: str) -> bool:
        """Whether the log (its last 100 kB) has a line starting with prefix."""
        return any(line.startswith(prefix) for line in self.log_tail(100_000).splitlines())

    def wait_for_line(self, prefix: str, timeout: float, stop=None) -> bool:
        """Wait until the log has a line starting with prefix (False: it died, timed out or stop was set)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not (stop is not None and stop.is_set()) and self.alive():
            if self.has_line(prefix):
                return True
            time.sleep(0.05)
        return False


class Children:
    def __init__(self, log_dir: Path, env: dict | None = None):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.children: dict[str, Child] = {}

    def start(self, name: str, argv: list[str], cwd: str | Path | None = None) -> Child:
        log = self.log_dir / f"{name}.log"
        with open(log, "w") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, cwd=cwd, start_new_session=True)
        child = Child(name, proc, log)
        self.children[name] = child
        return child

    def dead(self) -> list[Child]:
        return [c for c in self.children.values() if not c.alive()]

    @staticmethod
    def stop(child: Child, grace_s: float = 15.0) -> int:
        """SIGINT, then SIGTERM, then SIGKILL (to the child's process group); its exit code."""
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if not child.alive():
                break
            try:
                os.killpg(child.pid, sig)
            except ProcessLookupError:
                break
            try:
                child.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        child.proc.wait()
        # anything left in its process group (a grandchild) goes too
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return child.proc.returncode

    def stop_all(self, order: list[str] | None = None, grace_s: float = 15.0) -> dict[str, int]:
        names = [n for n in (order or []) if n in self.children]
        names += [n for n in self.children if n not in names]
        return {n: self.stop(self.children[n], grace_s) for n in names}

    def wait_any_exit(self, seconds: float) -> Child | None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            dead = self.dead()
            if dead:
                return dead[0]
            time.sleep(0.05)
        return None

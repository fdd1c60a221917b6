"""colcon builds both packages of this repository in a ROS workspace (scripts/check_colcon.sh).

Slow-ish (~25 s: it generates oxygen_msgs again); deselect with `-m "not colcon"`.
"""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.colcon
def test_colcon_builds_oxygen_msgs_and_oxygen_ros(tmp_path):
    out = subprocess.run([str(ROOT / "scripts" / "check_colcon.sh"), str(tmp_path / "ws")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-6000:]
    assert "Finished <<< oxygen_msgs" in out.stdout + out.stderr
    assert "Finished <<< oxygen_ros" in out.stdout + out.stderr
    assert "OK: colcon built oxygen_msgs and oxygen_ros" in out.stdout

#!/usr/bin/env bash
# Check that this repository builds with colcon inside a ROS 2 workspace, the way it
# is built on a robot:
#
#   <ws>/src/oxygen_ros -> this repository
#   colcon build --base-paths src src/oxygen_ros/oxygen_msgs
#
# colcon stops descending at a directory that is a package, and the repository root
# is one (oxygen_ros), so the nested oxygen_msgs is named as a second base path.
# Here ROS comes from the venv's PyPI wheels (AMENT_PREFIX_PATH/CMAKE_PREFIX_PATH =
# .venv); on a ROS install, source /opt/ros/jazzy/setup.bash instead.
#
# Usage: scripts/check_colcon.sh [WORKSPACE]   (default: a new temporary directory,
# removed afterwards unless KEEP_WS=1)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
[ -x "$VENV/bin/colcon" ] || { echo "run scripts/setup.sh first (.venv/bin/colcon missing)" >&2; exit 1; }

if [ $# -ge 1 ]; then
    WS="$1"
else
    WS="$(mktemp -d "${TMPDIR:-/tmp}/oxygen_colcon_ws.XXXXXX")"
    [ "${KEEP_WS:-0}" = 1 ] || trap 'rm -rf "$WS"' EXIT
fi
mkdir -p "$WS/src"
ln -sfn "$ROOT" "$WS/src/oxygen_ros"
cd "$WS"

export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
# Nothing here starts a node, but keep any DDS traffic on this machine all the same.
export ROS_LOCALHOST_ONLY=1 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$((RANDOM % 100 + 1))}"

echo "[check_colcon] workspace: $WS"
colcon build --base-paths src src/oxygen_ros/oxygen_msgs \
    --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF

# Both packages are installed, the node's executable where `ros2 run` looks for it.
test -f install/oxygen_msgs/share/oxygen_msgs/package.xml
test -f install/oxygen_ros/share/oxygen_ros/package.xml
test -f install/oxygen_ros/share/ament_index/resource_index/packages/oxygen_ros
test -x install/oxygen_ros/lib/oxygen_ros/oxygen_node
test -x install/oxygen_ros/lib/oxygen_ros/oxygen

# The workspace's own oxygen_msgs and oxygen_ros import once its setup file is sourced.
set +u
# shellcheck disable=SC1091
. install/setup.sh
set -u
python - <<'PY'
import os
import oxygen_msgs.msg
import oxygen_ros
ws = os.getcwd()
for module in (oxygen_msgs.msg, oxygen_ros):
    assert module.__file__.startswith(ws), f"{module.__name__} not from the workspace: {module.__file__}"
    print(f"[check_colcon] {module.__name__} from {os.path.relpath(module.__file__, ws)}")
PY
echo "[check_colcon] OK: colcon built oxygen_msgs and oxygen_ros"

#!/usr/bin/env bash
# Set up the development environment of oxygen_ros from a fresh clone, or bring an
# existing one up to date:
#
#   1. .venv/          virtual environment (Python 3.11), pinned pip + setuptools
#   2. dependencies    requirements.txt, then requirements-nodeps.txt with --no-deps
#   3. oxygen_msgs     generated with the real rosidl toolchain (CMake + Ninja) and
#                      installed into the venv prefix
#   4. oxygen_ros      `pip install --no-deps -e .`, plus setup.py's data_files
#                      (package.xml, ament index marker, launch/, config/) linked
#                      into .venv/share, the console scripts into .venv/lib/oxygen_ros
#   5. native path     builds the fused action sampling (oxygen_ros/engine/native, C++,
#                      ~20 s once) into the cache; without a C++ compiler the engine
#                      runs eager and this step says so
#
# Each step records a stamp (.venv/.oxygen-setup/<step>) holding a hash of its inputs
# and reruns only when that hash changes, so a second run takes about a second. An
# existing .venv is reused, never deleted. Usage: scripts/setup.sh [--force]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMPS="$VENV/.oxygen-setup"
PY="$VENV/bin/python"
MSGS_BUILD="$ROOT/build/venv-oxygen_msgs"
BOOTSTRAP_PINS=(pip==26.3 setuptools==79.0.1)
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# Hash of the given files' contents (and names), plus any extra strings.
hash_of() {
    local f
    {
        for f in "$@"; do
            if [ -f "$f" ]; then printf '%s\n' "${f#"$ROOT"/}"; cat "$f"; else printf '%s\n' "$f"; fi
        done
    } | sha256sum | cut -c1-16
}

# pip, minus the "Location 'file:///...' is ignored" warnings that a pip config with
# local find-links/extra-index-url directories prints for every package.
pip_install() {
    "$PY" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
        | { grep -v "^WARNING: Location 'file:" || true; }
}

stamp_ok() { [ "$FORCE" = 0 ] && [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
stamp_set() { mkdir -p "$STAMPS"; printf '%s\n' "$2" > "$STAMPS/$1"; }

# ---------------------------------------------------------------- 1. virtual env
if [ ! -x "$PY" ]; then
    base_py="${PYTHON:-}"
    if [ -z "$base_py" ]; then
        for candidate in python3.11 python3; do
            if command -v "$candidate" >/dev/null 2>&1 &&
               "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
                base_py="$candidate"; break
            fi
        done
    fi
    [ -n "$base_py" ] || die "Python 3.11 not found (the ROS 2 Jazzy wheels are cp311); set PYTHON=/path/to/python3.11"
    log "creating .venv with $(command -v "$base_py")"
    "$base_py" -m venv "$VENV"
fi
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die ".venv is not Python 3.11; move it away and rerun"

# ---------------------------------------------------------------- 2. dependencies
deps_key="$(hash_of "$ROOT/requirements.txt" "$ROOT/requirements-nodeps.txt" "${BOOTSTRAP_PINS[*]}")"
if stamp_ok deps "$deps_key"; then
    log "dependencies up to date"
else
    log "installing dependencies (first run: a few minutes)"
    start=$SECONDS
    pip_install "${BOOTSTRAP_PINS[@]}"
    pip_install -r "$ROOT/requirements.txt"
    pip_install --no-deps -r "$ROOT/requirements-nodeps.txt"
    stamp_set deps "$deps_key"
    log "dependencies installed in $((SECONDS - start)) s"
fi

# Run installed ROS tools as on a sourced ROS install: a venv-wide default for
# AMENT_PREFIX_PATH (ament_index_python, `get_package_share_directory`). An existing
# value (a sourced /opt/ros) is kept.
PTH="$VENV/lib/python3.11/site-packages/oxygen_ament_prefix.pth"
PTH_LINE="import os, sys; os.environ.setdefault('AMENT_PREFIX_PATH', sys.prefix)"
if [ ! -f "$PTH" ] || [ "$(cat "$PTH")" != "$PTH_LINE" ]; then
    printf '%s\n' "$PTH_LINE" > "$PTH"
fi

# ---------------------------------------------------------------- 3. oxygen_msgs
msgs_files=("$ROOT"/oxygen_msgs/package.xml "$ROOT"/oxygen_msgs/CMakeLists.txt
            "$ROOT"/oxygen_msgs/msg/*.msg "$ROOT"/oxygen_msgs/srv/*.srv)
msgs_key="$(hash_of "${msgs_files[@]}" "$deps_key")"
if stamp_ok msgs "$msgs_key" && [ -f "$VENV/lib/python3.11/site-packages/oxygen_msgs/__init__.py" ]; then
    log "oxygen_msgs up to date"
else
    command -v cmake >/dev/null || die "cmake not found (apt-get install cmake)"
    command -v cc >/dev/null || die "a C compiler is needed (apt-get install build-essential)"
    log "generating oxygen_msgs with rosidl"
    start=$SECONDS
    rm -rf "$MSGS_BUILD"
    mkdir -p "$MSGS_BUILD"
    LOG="$MSGS_BUILD/setup.log"
    # The rosidl CMake packages live in the venv prefix: point CMake and ament there,
    # and use this venv's interpreter for the generators and the Python bindings.
    env PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV" \
        AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" \
        cmake -G Ninja -S "$ROOT/oxygen_msgs" -B "$MSGS_BUILD" \
            -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
            -DPython3_EXECUTABLE="$PY" -DCMAKE_INSTALL_PREFIX="$VENV" \
            > "$LOG" 2>&1 \
        || { tail -n 40 "$LOG"; die "configuring oxygen_msgs failed (log: $LOG)"; }
    env PATH="$VENV/bin:$PATH" cmake --build "$MSGS_BUILD" >> "$LOG" 2>&1 \
        || { tail -n 40 "$LOG"; die "building oxygen_msgs failed (log: $LOG)"; }
    cmake --install "$MSGS_BUILD" >> "$LOG" 2>&1 \
        || { tail -n 40 "$LOG"; die "installing oxygen_msgs failed (log: $LOG)"; }
    "$PY" -c 'from oxygen_msgs.msg import TextChunk, FrameTiming; from oxygen_msgs.srv import AskProgress' \
        || die "oxygen_msgs was installed but does not import"
    stamp_set msgs "$msgs_key"
    log "oxygen_msgs installed in $((SECONDS - start)) s"
fi

# ---------------------------------------------------------------- 3b. tf2_msgs
# `oxygen sim` publishes /tf (tf2_msgs/TFMessage); ros-jazzy-tf2-msgs is not on PyPI, so
# its one message is generated here the same way (third_party/tf2_msgs).
TF2_SRC="$ROOT/third_party/tf2_msgs"
TF2_BUILD="$ROOT/build/venv-tf2_msgs"
tf2_key="$(hash_of "$TF2_SRC"/package.xml "$TF2_SRC"/CMakeLists.txt "$TF2_SRC"/msg/*.msg "$deps_key")"
if stamp_ok tf2_msgs "$tf2_key" && [ -f "$VENV/lib/python3.11/site-packages/tf2_msgs/__init__.py" ]; then
    log "tf2_msgs up to date"
else
    log "generating tf2_msgs (TFMessage) with rosidl"
    start=$SECONDS
    rm -rf "$TF2_BUILD"
    mkdir -p "$TF2_BUILD"
    LOG="$TF2_BUILD/setup.log"
    { env PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV" AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" \
          cmake -G Ninja -S "$TF2_SRC" -B "$TF2_BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
              -DPython3_EXECUTABLE="$PY" -DCMAKE_INSTALL_PREFIX="$VENV" \
      && env PATH="$VENV/bin:$PATH" cmake --build "$TF2_BUILD" \
      && cmake --install "$TF2_BUILD"; } > "$LOG" 2>&1 \
        || { tail -n 40 "$LOG"; die "generating tf2_msgs failed (log: $LOG)"; }
    "$PY" -c 'from tf2_msgs.msg import TFMessage' || die "tf2_msgs was installed but does not import"
    stamp_set tf2_msgs "$tf2_key"
    log "tf2_msgs installed in $((SECONDS - start)) s"
fi

# ---------------------------------------------------------------- 4. oxygen_ros
# Editable install: Python modules come from the working tree. pip skips data_files in
# editable mode, so link_data_files.py links them (package.xml, ament index marker,
# launch/, config/) into .venv/share, and the console scripts into .venv/lib/oxygen_ros/
# (where `ros2 run` and launch_ros look, as in a colcon install); the key holds their
# names, not their contents.
data_names="$(cd "$ROOT" && ls -1 launch/*.launch.py config/*.yaml 2>/dev/null || true)"
pkg_key="$(hash_of "$ROOT"/setup.py "$ROOT"/setup.cfg "$ROOT"/package.xml "$data_names" "$deps_key")"
if stamp_ok pkg "$pkg_key" && [ -x "$VENV/bin/oxygen" ] && [ -e "$VENV/share/oxygen_ros/package.xml" ] \
        && [ -x "$VENV/lib/oxygen_ros/oxygen_node" ]; then
    log "oxygen_ros (editable) up to date"
else
    log "installing oxygen_ros in editable mode"
    (cd "$ROOT" && PYTHONWARNINGS="ignore:Editable installation" \
        pip_install --no-deps --no-build-isolation -e .)
    "$PY" "$ROOT/scripts/link_data_files.py" "$VENV"
    stamp_set pkg "$pkg_key"
fi

# ---------------------------------------------------------------- 5. native path
native_key="$(hash_of "$ROOT"/oxygen_ros/engine/native/*.cpp "$ROOT"/oxygen_ros/engine/native/__init__.py "$deps_key")"
if stamp_ok native "$native_key"; then
    log "native fused path up to date"
else
    start=$SECONDS
    "$PY" -m oxygen_ros.engine.native 2>&1 | sed 's/^\[native\] /[setup] /'
    stamp_set native "$native_key"
    log "native step done in $((SECONDS - start)) s"
fi

log "ready: $VENV"

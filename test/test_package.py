"""Packaging: both package.xml files declare what a ROS install resolves, the editable
install exposes setup.py's data_files through the ament index, and the `oxygen` CLI
registers its subcommands lazily."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _package(path):
    from catkin_pkg.package import parse_package

    return parse_package(str(path))


def test_oxygen_ros_package_xml():
    pkg = _package(ROOT / "package.xml")
    assert pkg.name == "oxygen_ros" and pkg.package_format == 3
    assert pkg.get_build_type() == "ament_python"
    run_deps = {d.name for d in pkg.exec_depends}
    assert {"rclpy", "lifecycle_msgs", "sensor_msgs", "trajectory_msgs", "diagnostic_msgs",
            "std_msgs", "oxygen_msgs", "launch_ros", "python3-numpy"} <= run_deps
    assert any("torch" in name for name in run_deps)
    assert (ROOT / "resource" / "oxygen_ros").is_file()


def test_oxygen_msgs_package_xml():
    pkg = _package(ROOT / "oxygen_msgs" / "package.xml")
    assert pkg.name == "oxygen_msgs" and pkg.package_format == 3
    assert pkg.get_build_type() == "ament_cmake"
    assert "rosidl_interface_packages" in {g.name for g in pkg.member_of_groups}
    assert "rosidl_default_generators" in {d.name for d in pkg.buildtool_depends}


def test_data_files_reachable_through_ament_index():
    """setup.py's data_files (package.xml, launch/, config/) are installed next to the venv's
    other ROS packages, and every launch and config file of the tree is among them."""
    from ament_index_python.packages import get_package_share_directory

    share = Path(get_package_share_directory("oxygen_ros"))
    assert (share / "package.xml").read_text() == (ROOT / "package.xml").read_text()
    for pattern in ("launch/*.launch.py", "config/*.yaml"):
        for source in ROOT.glob(pattern):
            installed = share / source.relative_to(ROOT)
            assert installed.is_file(), f"{installed} missing: run `make setup`"
            assert installed.read_bytes() == source.read_bytes()


def test_every_subcommand_module_has_add_arguments_and_run():
    from oxygen_ros.cli import COMMANDS

    names = [name for name, _, _ in COMMANDS]
    assert len(names) == len(set(names))
    for name, module_name, help_text in COMMANDS:
        module = importlib.import_module(module_name)
        assert callable(module.add_arguments) and callable(module.run), name
        assert help_text, name


def test_help_is_fast_and_imports_no_heavy_module():
    """`oxygen --help` lists the subcommands without importing torch, rclpy or any of them."""
    code = (
        "import sys\n"
        "from oxygen_ros import cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('torch', 'rclpy', 'numpy') if m in sys.modules]\n"
        "heavy += [mod for _, mod, _ in cli.COMMANDS if mod in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    from oxygen_ros.cli import COMMANDS

    for name, _, _ in COMMANDS:
        assert name in out.stdout


def test_console_scripts_installed():
    bin_dir = Path(sys.executable).parent
    out = subprocess.run([str(bin_dir / "oxygen"), "info", "--skip", "torch"],
                         capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "oxygen_msgs" in out.stdout and "rclpy" in out.stdout
    assert (bin_dir / "oxygen_node").exists()


def test_executables_where_ros2_run_and_launch_ros_look():
    """As in a colcon install, every console script is an executable file at
    <package prefix>/lib/oxygen_ros/<name> (the path `ros2 run` and launch_ros's Node
    build from the ament index), and it is the same program as the one in .venv/bin."""
    from ament_index_python.packages import get_package_prefix

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from link_data_files import console_scripts
    finally:
        sys.path.pop(0)
    package, names = console_scripts()
    assert package == "oxygen_ros" and {"oxygen_node", "oxygen"} <= set(names)
    lib = Path(get_package_prefix("oxygen_ros")) / "lib" / "oxygen_ros"
    executables = sorted(f.name for f in lib.iterdir() if f.is_file() and os.access(f, os.X_OK))
    assert executables == sorted(names), f"{lib}: {executables}; run `make setup`"
    for name in names:
        assert (lib / name).resolve() == (Path(sys.executable).parent / name).resolve()
    out = subprocess.run([str(lib / "oxygen"), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "demo" in out.stdout, out.stdout + out.stderr


def test_unknown_subcommand_is_an_error():
    from oxygen_ros.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2

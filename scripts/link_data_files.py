"""Install setup.py's data_files into a prefix as symlinks to the working tree, and
the console scripts where ROS tools look for a package's executables.

`pip install -e .` does not install data_files (setuptools' editable wheels skip them,
pypa/setuptools#3399), yet ROS tools find a package through them: the ament index
marker, share/<pkg>/package.xml, launch/ and config/. This links each declared file
into <prefix>/<dir>/ (what `colcon build --symlink-install` does), so edits to a
config YAML show up without reinstalling, and removes links whose source is gone.

`ros2 run` and launch_ros find an executable at <prefix>/lib/<package>/<executable>
(setup.cfg's script_dir under colcon); pip puts console scripts into <prefix>/bin. So
each console script is also linked as <prefix>/lib/oxygen_ros/<name> -> ../../bin/<name>.

Usage: python scripts/link_data_files.py PREFIX   (run from anywhere)
"""

import os
import runpy
import sys
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parent.parent


def declared_setup():
    """The keyword arguments of setup.py's setup(), read without running a setuptools command."""
    captured = {}
    real_setup = setuptools.setup
    setuptools.setup = lambda **kwargs: captured.update(kwargs)
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        os.chdir(cwd)
        setuptools.setup = real_setup
    return captured


def declared_data_files():
    return declared_setup().get("data_files", [])


def console_scripts() -> tuple[str, list[str]]:
    """(package name, console script names) declared by setup.py."""
    kwargs = declared_setup()
    scripts = kwargs.get("entry_points", {}).get("console_scripts", [])
    return kwargs["name"], [entry.split("=", 1)[0].strip() for entry in scripts]


def link_executables(prefix: Path) -> int:
    """<prefix>/lib/<package>/<script> -> ../../bin/<script> for every console script."""
    package, names = console_scripts()
    lib = prefix / "lib" / package
    lib.mkdir(parents=True, exist_ok=True)
    for name in names:
        dest, target = lib / name, Path("..", "..", "bin", name)
        if dest.is_symlink() and Path(os.readlink(dest)) == target:
            continue
        if dest.exists() or dest.is_symlink():
            dest.unlink()
        dest.symlink_to(target)
    return len(names)


def link(prefix: Path) -> int:
    wanted = {}
    dest_dirs = set()
    for rel_dir, files in declared_data_files():
        dest_dirs.add(prefix / rel_dir)
        for rel_file in files:
            source = (ROOT / rel_file).resolve()
            wanted[prefix / rel_dir / source.name] = source
    for dest_dir in sorted(dest_dirs):
        dest_dir.mkdir(parents=True, exist_ok=True)
        # Links into this tree whose file was removed or is no longer declared.
        for entry in dest_dir.iterdir():
            if entry.is_symlink() and entry not in wanted:
                target = Path(os.readlink(entry))
                if ROOT in target.parents:
                    entry.unlink()
    for dest, source in sorted(wanted.items()):
        if dest.is_symlink() and Path(os.readlink(dest)) == source:
            continue
        if dest.exists() or dest.is_symlink():
            dest.unlink()
        dest.symlink_to(source)
    return len(wanted)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    count = link(Path(sys.argv[1]).resolve())
    scripts = link_executables(Path(sys.argv[1]).resolve())
    print(f"[setup] linked {count} data files and {scripts} executables (lib/oxygen_ros/) into {sys.argv[1]}")

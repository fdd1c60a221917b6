"""The package's layering and the docs' references, checked from the source text.

Layering (README "Layout"): commands/ -> tools/ -> node/ -> engine/, one way only.
- nothing under engine/ imports ROS (rclpy, message packages) or node/, tools/, commands/;
- node/ imports nothing from tools/ or commands/, and never engine/bench/;
- no subcommand imports another subcommand.
Docs: every repository path named in README.md and docs/*.md exists, and every `make`
target and `oxygen` subcommand named there is real.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "oxygen_ros"
ROS_MODULES = {"rclpy", "rcl_interfaces", "builtin_interfaces", "ament_index_python", "rosidl_runtime_py",
               "rosbag2_py", "launch", "launch_ros", "cv_bridge"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports (relative imports resolved), at any depth in the file."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)   # `from pkg import module`
    return found


def is_ros(name: str) -> bool:
    top = name.split(".")[0]
    return top in ROS_MODULES or top.endswith("_msgs") or top.endswith("_srvs")


def modules_under(folder: str):
    return sorted((PKG / folder).rglob("*.py"))


def test_engine_is_ros_free_and_imports_nothing_above_it():
    problems = []
    for path in modules_under("engine"):
        for name in imports(path):
            if is_ros(name) or name.startswith(("oxygen_ros.node", "oxygen_ros.tools", "oxygen_ros.commands")):
                problems.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not problems, "\n".join(problems)


def test_node_imports_neither_tools_nor_commands_nor_bench():
    problems = []
    for path in modules_under("node"):
        for name in imports(path):
            if name.startswith(("oxygen_ros.tools", "oxygen_ros.commands", "oxygen_ros.engine.bench")):
                problems.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not problems, "\n".join(problems)


def test_tools_import_no_commands_and_no_subcommand_imports_another():
    problems = []
    for path in modules_under("tools"):
        problems += [f"{path.relative_to(ROOT)} imports {n}" for n in imports(path)
                     if n.startswith("oxygen_ros.commands")]
    for path in modules_under("commands"):
        own = module_name(path)
        for name in imports(path):
            if name.startswith("oxygen_ros.commands.") and not own.startswith(name) and name != own:
                problems.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not problems, "\n".join(problems)


def test_node_package_init_imports_nothing():
    """`import oxygen_ros.node.convert` (ROS-free helpers) must not pull in rclpy."""
    assert not imports(PKG / "node" / "__init__.py")


# -- docs -----------------------------------------------------------------------------------
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("oxygen_ros/", "oxygen_msgs/", "launch/", "config/", "test/", "scripts/", "docs/", ".ci/", "resource/")
ROOT_FILES = {"Makefile", "package.xml", "setup.py", "setup.cfg", "pytest.ini", "requirements.txt",
              "requirements-nodeps.txt"}
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def code_spans(text: str) -> list[str]:
    return [m.group(0).strip("`") for m in CODE.finditer(text)]


def named_paths(doc: Path) -> set[Path]:
    text = doc.read_text()
    paths = set()
    for target in LINK.findall(text):
        if not re.match(r"^[a-z]+:", target) and not target.startswith("#"):
            paths.add((doc.parent / target.split("#")[0]).resolve())
    for span in code_spans(text):
        for token in re.findall(r"[\w./*<>{}…-]+", span):
            token = token.rstrip(".,:;")
            if re.search(r"[*<>{}…]", token):          # a pattern, not a path
                continue
            interface = re.fullmatch(r"oxygen_msgs/(?:(msg|srv)/)?([A-Z]\w*)", token)
            if interface:                               # a type name: its .msg/.srv file
                kind = interface.group(1) or "msg"
                paths.add(ROOT / "oxygen_msgs" / kind / f"{interface.group(2)}.{kind}")
            elif token.startswith(TOP) or token in ROOT_FILES:
                paths.add((ROOT / token).resolve())
    return paths


def test_every_path_named_in_the_docs_exists():
    missing = [f"{doc.relative_to(ROOT)}: {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}"
               for doc in DOCS for p in sorted(named_paths(doc)) if not p.exists()]
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-zA-Z_-]+):", (ROOT / "Makefile").read_text(), re.M))


def oxygen_subcommands() -> set[str]:
    from oxygen_ros.cli import COMMANDS

    return {name for name, _module, _help in COMMANDS}


def test_every_make_target_and_oxygen_subcommand_named_in_the_docs_is_real():
    targets, subcommands = make_targets(), oxygen_subcommands()
    assert {"setup", "test", "demo", "check-colcon"} <= targets
    problems = []
    for doc in DOCS:
        for span in code_spans(doc.read_text()):
            for target in re.findall(r"(?<![\w/.-])make ([a-z][\w-]*)", span):
                if target not in targets:
                    problems.append(f"{doc.name}: make {target}")
            # as a command: at the start of a line or span, or run from .venv/bin/
            for sub in re.findall(r"(?:^|bin/)oxygen ([a-z][\w-]*)", span, re.M):
                if sub not in subcommands:
                    problems.append(f"{doc.name}: oxygen {sub}")
    assert not problems, "unknown make targets / oxygen subcommands in the docs:\n" + "\n".join(problems)

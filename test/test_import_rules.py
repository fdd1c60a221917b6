"""The package's import rules (docs/engine.md "Rooms"; docs/models.md "Adding a model family").

Read from the source with ast, every import included: inside functions (a lazy import is
still an arrow) and under `if TYPE_CHECKING:` (an import for type hints ties two rooms as
much as one that runs): no circles; no module of the node but its entry point imports
oxygen_node (its parts take what they use, node/runtime.py); a family imports only the
families it declares as bases in the registry; the shared rooms (the engine outside models/,
layers/ included) import no family; nothing outside the engine (node, tools, commands)
imports a family: they go through the registry.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from oxygen_ros.engine import registry

PACKAGE = Path(__file__).resolve().parents[1] / "oxygen_ros"
FAMILY_ROOT = "oxygen_ros.engine.models."


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, path: Path) -> set[str]:
    """The package modules `module` imports anywhere in its file (the most specific module
    each import names: `from pkg import submodule` is an arrow to the submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            src = _resolve(node, module, path.name == "__init__.py")
            names = [f"{src}.{a.name}" if f"{src}.{a.name}" in MODULES else src for a in node.names]
        for name in names:
            while name and name not in MODULES:      # `import a.b.c` where c is an attribute
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {m: _targets(m, p) for m, p in MODULES.items()}


def _family(module: str) -> str | None:
    if not module.startswith(FAMILY_ROOT):
        return None
    return module[len(FAMILY_ROOT):].split(".")[0]


def test_the_graph_is_read():
    """The rules below are only as good as the graph: it has the arrows we know exist."""
    assert "oxygen_ros.engine.layers.decoder" in GRAPH["oxygen_ros.engine.models.pi05.modeling"]
    assert "oxygen_ros.engine.models.qwen3vl.configuration" in GRAPH["oxygen_ros.engine.models.xr0.configuration"]
    # lazy, inside a function
    assert "oxygen_ros.engine.registry" in GRAPH["oxygen_ros.engine.factory"]


def test_imports_for_type_hints_count(tmp_path):
    """An import under `if TYPE_CHECKING:` is an arrow too (it ties the two rooms all the same)."""
    source = tmp_path / "part.py"
    source.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                      "    from .oxygen_node import OxygenNode\n")
    assert _targets("oxygen_ros.node.part", source) == {"oxygen_ros.node.oxygen_node"}


def test_no_import_circles():
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):        # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_only_the_entry_point_imports_the_node():
    """The node's parts take narrow doors (node/runtime.py), never the node itself."""
    node = "oxygen_ros.node.oxygen_node"
    wrong = [m for m, targets in GRAPH.items() if node in targets and m != "oxygen_ros.node.__main__"]
    assert not wrong, f"import {node}: {wrong}"


def test_families_import_only_their_declared_bases():
    declared = {f.name: set(f.bases) for f in registry.FAMILIES}
    wrong = []
    for module, targets in GRAPH.items():
        fam = _family(module)
        if fam is None:
            continue
        for target in targets:
            other = _family(target)
            if other is not None and other != fam and other not in declared[fam]:
                wrong.append(f"{module} -> {target} ({fam} declares {sorted(declared[fam])})")
    assert not wrong, "\n".join(wrong)


def test_shared_rooms_and_everything_outside_the_engine_import_no_family():
    wrong = [f"{module} -> {target}" for module, targets in GRAPH.items()
             if _family(module) is None and module != "oxygen_ros.engine.models"
             for target in targets if _family(target) is not None]
    assert not wrong, "reach a family through engine/registry.py:\n" + "\n".join(wrong)


def test_every_family_folder_is_registered_with_bases_that_exist():
    folders = {p.name for p in (PACKAGE / "engine" / "models").iterdir()
               if p.is_dir() and (p / "__init__.py").is_file()}
    names = {f.name for f in registry.FAMILIES}
    assert folders == names
    for f in registry.FAMILIES:
        assert set(f.bases) <= names - {f.name}
        assert f.module == FAMILY_ROOT + f.name


@pytest.mark.parametrize("fam", registry.FAMILIES, ids=lambda f: f.name)
def test_registry_profiles_match_each_family(fam):
    """The registry lists profiles as data (nothing imported at start-up); each family's
    PROFILES defines exactly those, except a profile sized by its checkpoint."""
    module = importlib.import_module(fam.module)
    assert set(module.PROFILES) <= set(fam.profiles)
    for name in fam.profiles:
        if name in module.PROFILES:
            assert registry.get_config(name).name == name
        else:
            with pytest.raises(ValueError, match="from its checkpoint"):
                registry.get_config(name)
    assert callable(module.load)


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown model profile 'nope'.*tiny.*xr0"):
        registry.load_model("nope")


# -- families alike: the factory asks a family, never names one (issue 43) ------------------

FAMILY_WORDS = sorted({f.name for f in registry.FAMILIES} | {p for f in registry.FAMILIES for p in f.profiles},
                      key=len, reverse=True)


def _names_a_family(text: str) -> list[str]:
    import re

    return [w for w in FAMILY_WORDS if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text, re.IGNORECASE)]


def test_the_factory_names_no_family_or_profile():
    """engine/factory.py asks the registry which family serves a profile or a policy I/O;
    each family builds its own (its name in a string, a branch or a helper's name would be
    a family's rule kept outside its folder)."""
    path = MODULES["oxygen_ros.engine.factory"]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{node.lineno}: {w!r} in a string" for w in _names_a_family(node.value)]
        name = getattr(node, "name", None) or getattr(node, "id", None) or getattr(node, "attr", None)
        if isinstance(name, str):
            found += [f"{node.lineno}: {name}" for w in ("xr0", "starvla", "pi05", "smol", "qwen3vl")
                      if w in name.lower()]
    assert not found, "engine/factory.py names a family:\n" + "\n".join(sorted(set(found)))


def _profile_branches(path: Path) -> list[str]:
    """Comparisons with a profile name (==, !=, in (...)) and startswith/endswith a piece of one."""
    profiles = [p for f in registry.FAMILIES for p in f.profiles]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        consts = []
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                consts += [c.value for c in items if isinstance(c, ast.Constant) and c.value in profiles]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and node.args):
            arg = node.args[0]
            items = arg.elts if isinstance(arg, ast.Tuple) else [arg]
            for c in items:
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and any(
                        getattr(p, node.func.attr)(c.value) for p in profiles):
                    consts.append(c.value)
        out += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {c!r}" for c in consts]
    return out


def test_nothing_outside_the_engine_branches_on_a_profile_name():
    """What a profile needs (its policy I/O, its weights prepared) is its family's, asked
    through engine/registry.py; the node, commands, serving and tools pass the name along."""
    found = [hit for module, path in MODULES.items() if not module.startswith("oxygen_ros.engine")
             for hit in _profile_branches(path)]
    assert not found, "branches on a profile name outside the engine:\n" + "\n".join(found)


def test_a_family_with_a_policy_io_exports_its_hooks():
    """The uniform hook: a family that declares policy I/O conventions in its registry line
    builds them (build_policy_io), fits the model to them (fit_model) and says what
    `oxygen serve` uses with a checkpoint (serve_policy_io)."""
    declared = [f for f in registry.FAMILIES if f.policy_io is not None]
    assert {f.name for f in declared} == {"pi05", "xr0", "starvla"}
    for f in declared:
        module = registry.family(f.name)
        for hook in ("build_policy_io", "fit_model", "serve_policy_io"):
            assert callable(getattr(module, hook, None)), f"{f.name} has no {hook}"
    assert registry.policy_io_names() == ("openpi", "lerobot", "xr0", "starvla")


@pytest.mark.parametrize("fam", [f.name for f in registry.FAMILIES])
def test_each_familys_config_classes_live_in_its_configuration(fam):
    """models/<family>/configuration.py holds the family's config dataclasses (pi05's
    already did; xr0's and starvla's head configs sat in head.py, qwen3vl's beside their
    modules in vision.py and modeling.py)."""
    folder = PACKAGE / "engine" / "models" / fam
    outside = [f"{path.name}: {node.name}" for path in folder.glob("*.py") if path.name != "configuration.py"
               for node in ast.parse(path.read_text(encoding="utf-8")).body
               if isinstance(node, ast.ClassDef) and node.name.endswith("Config")]
    assert not outside, f"config classes outside {fam}/configuration.py: {outside}"


def test_head_configs_are_defined_in_configuration():
    for fam, name in (("xr0", "XR0HeadConfig"), ("starvla", "PIv3HeadConfig")):
        tree = ast.parse((PACKAGE / "engine" / "models" / fam / "configuration.py").read_text(encoding="utf-8"))
        assert name in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}, f"{fam}: {name}"


def test_starvla_dit_blocks_take_plain_numbers():
    """dit.py's modules are built from numbers (width, heads, ...) as diffusers' are, not
    from the head's config: no constructor reads fields of an argument, and dit.py imports
    nothing of head.py."""
    module = "oxygen_ros.engine.models.starvla.dit"
    assert not {t for t in GRAPH[module] if t.startswith("oxygen_ros.engine.models.starvla.")}
    reads = []
    for cls in ast.parse(MODULES[module].read_text(encoding="utf-8")).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                args = {a.arg for a in fn.args.args[1:] + fn.args.kwonlyargs}
                reads += [f"{cls.name}: {n.value.id}.{n.attr}" for n in ast.walk(fn)
                          if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in args]
    assert not reads, f"dit.py's constructors read fields of their arguments: {reads}"


# -- engine/ grouped by kind (issue 43) -----------------------------------------------------

ENGINE_CORE = {"admission", "answer_estimate", "chunk_graphs", "config", "decode_graphs", "factory", "fleet",
               "fleet_batch", "frame", "generate", "kv_pool", "questions", "registry", "requests",
               "robot_language", "rtc", "scheduler", "state_checks", "transfer"}
ENGINE_FOLDERS = {"bench", "layers", "models", "native", "observation", "policy_io", "text"}
LEAF_FOLDERS = ("text", "observation")


def test_the_engine_root_holds_only_the_core():
    """engine/'s root is the core (frames, the scheduler, the KV pool, the GPU path, the
    registry and factory, one robot's language life); text/ (tokenizers, chat templates,
    prompts, the memory log) and observation/ (a frame's input, camera views) are folders
    of their own, beside layers/, models/, policy_io/, bench/ and native/ (docs/engine.md)."""
    root = PACKAGE / "engine"
    files = {p.stem for p in root.glob("*.py")} - {"__init__"}
    folders = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert files == ENGINE_CORE, f"not core: {sorted(files - ENGINE_CORE)}; missing: {sorted(ENGINE_CORE - files)}"
    assert folders == ENGINE_FOLDERS


@pytest.mark.parametrize("folder", LEAF_FOLDERS)
def test_text_and_observation_import_nothing_outside_their_folder(folder):
    """text/ and observation/ are leaves: the core and the families import them, they import
    no family, no core module and no other room of the package."""
    room = f"oxygen_ros.engine.{folder}"
    modules = [m for m in GRAPH if m.startswith(room + ".")]
    assert modules, f"engine/{folder}/ holds no module"
    wrong = [f"{m} -> {t}" for m in modules for t in GRAPH[m] if t != room and not t.startswith(room + ".")]
    assert not wrong, "\n".join(wrong)


# -- one door a room (issue 43): a camera image and a question each enter a module once --------

def _reaches(module: str) -> set[str]:
    """The attribute names `module` reads or writes anywhere (`x.board.fail` reaches board and fail)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def test_the_question_service_asks_only_its_robots_language():
    """node/question_service.py hands a question to RobotLanguage's door (ask_progress) and
    nothing else of the robot: not the memory log, the board, the estimate, the loop's
    figures, the model's or the engine's config."""
    module = "oxygen_ros.node.question_service"
    imports = GRAPH[module] - {"oxygen_ros.engine.robot_language"}
    assert not {t for t in imports if t.startswith("oxygen_ros.engine")}, imports
    reached = _reaches(module) & {"board", "answers", "stats", "model", "engine", "memory", "cfg", "config"}
    assert not reached, f"question_service.py reaches through its robot: {sorted(reached)}"


def test_serve_checks_a_question_through_the_same_door():
    """oxygen serve checks a question's text with RobotLanguage as the node does: no memory-log
    import of its own."""
    assert "oxygen_ros.engine.text.memory_log" not in GRAPH["oxygen_ros.serving.sessions"]
    assert "check_question" in _reaches("oxygen_ros.serving.sessions")


def test_the_frame_loop_takes_a_robots_inputs_through_one_door():
    """node/frame_loop.py asks SensorInputs for a frame's inputs (frame_inputs): it neither
    snapshots the input monitor nor sets its age limit; the frame publisher counts clipped
    points in the loop's figures and takes its settings at construction."""
    assert not _reaches("oxygen_ros.node.frame_loop") & {"monitor", "answers", "joint_input"}
    assert not _reaches("oxygen_ros.node.frame_publisher") & {"clipped_points", "p", "config"}


@pytest.mark.parametrize("module", ["oxygen_ros.node.oxygen_node", "oxygen_ros.serving.sessions"])
def test_robot_language_counts_tokens_itself(module):
    """RobotLanguage gets the tokenizer, not a token-counting function of the node's or serve's:
    no argument of its construction is a lambda (bound methods such as stats.stalled may pass)."""
    calls = [n for n in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8")))
             if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "RobotLanguage"]
    assert calls
    lambdas = [n.lineno for c in calls for a in [*c.args, *(k.value for k in c.keywords)]
               if isinstance(a, ast.Lambda)]
    assert not lambdas, f"{module} passes RobotLanguage a function of its own at lines {lambdas}"

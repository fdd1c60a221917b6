"""The fused (native) action sampling: bitwise the eager outputs, and eager without a compiler."""
import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine_fixtures import observation, tiny
from oxygen_ros.engine import native
from oxygen_ros.engine.bench.baselines import IsolatedRunner
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine

needs_native = pytest.mark.skipif(not native.available(), reason="no native build (no C++ compiler)")


@needs_native
@pytest.mark.parametrize("prefix_len,dtype", [(1, torch.float32), (37, torch.float32), (20, torch.bfloat16)])
def test_fused_sampling_equals_eager_bitwise(prefix_len, dtype, monkeypatch):
    from oxygen_ros.engine.models.pi05.expert import ActionExpert

    native_results = []     # the native call must really run, not fall back to eager
    native_sample = ActionExpert._sample_native
    monkeypatch.setattr(ActionExpert, "_sample_native",
                        lambda self, *a: native_results.append(native_sample(self, *a)) or native_results[-1])
    model, _ = tiny()
    if dtype != torch.float32:
        model = copy.deepcopy(model).to(dtype).pack_weights()
    pool = model.new_pool(3, 64)
    gen = torch.Generator().manual_seed(prefix_len)
    pool.k.copy_(torch.randn(pool.k.shape, generator=gen))
    pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
    noise = torch.randn(10, 8, generator=gen)
    with torch.inference_mode():
        eager = model.sample_actions(pool, 1, prefix_len, noise, fused=False)
        k_eager = pool.k.clone()
        pool.k[:, 1, :, prefix_len:prefix_len + 10].zero_()
        fused = model.sample_actions(pool, 1, prefix_len, noise, fused=True)
    assert len(native_results) == 1 and native_results[0] is not None
    assert torch.equal(fused, eager)
    assert torch.equal(pool.k, k_eager)        # the expert's own K/V land where eager puts them


@needs_native
def test_fused_sampling_reads_the_blocked_copies_alone(monkeypatch):
    """An expert with matrices large enough for oneDNN keeps no dense packed matrix (one
    resident copy of each weight, issue 44): the native call reads the blocked copies and
    still reproduces eager bitwise."""
    import dataclasses
    from oxygen_ros.engine.layers.blocks import packed_groups
    from oxygen_ros.engine.models.pi05.configuration import TINY
    from oxygen_ros.engine.models.pi05.expert import ActionExpert
    from oxygen_ros.engine.models.pi05.modeling import build_random_model

    model = build_random_model(dataclasses.replace(TINY, expert=dataclasses.replace(TINY.expert, width=256,
                                                                                    mlp_dim=1024)))
    groups = [g for g in packed_groups(model.expert) if g.blocked is not None]
    if not groups:
        pytest.skip("oneDNN weight copies are not in use here")
    assert all(g.matrix is None for g in groups)
    native_results = []
    native_sample = ActionExpert._sample_native
    monkeypatch.setattr(ActionExpert, "_sample_native",
                        lambda self, *a: native_results.append(native_sample(self, *a)) or native_results[-1])
    pool = model.new_pool(2, 64)
    gen = torch.Generator().manual_seed(3)
    pool.k.copy_(torch.randn(pool.k.shape, generator=gen))
    pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
    noise = torch.randn(10, 8, generator=gen)
    with torch.inference_mode():
        eager = model.sample_actions(pool, 1, 21, noise, fused=False)
        fused = model.sample_actions(pool, 1, 21, noise, fused=True)
    assert len(native_results) == 1 and native_results[0] is not None
    assert torch.equal(fused, eager)


@needs_native
def test_fused_engine_equals_eager_isolated():
    """An OxyGen engine on the fused path reproduces isolated eager action inference."""
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, fused=True))
    iso = IsolatedRunner(model, tok, EngineConfig(fused=False))
    for f in range(3):
        noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(f))
        res = engine.step(observation(f), noise)
        assert (res.actions == iso.action(observation(f), noise).numpy()).all()


def test_replaced_weights_run_eager_in_the_fused_path():
    """Weights that are not packed (replaced tensors) run the eager path, not stale weights."""
    model, _ = tiny()
    m = copy.deepcopy(model)
    layer = m.expert.layers[0]
    with torch.no_grad():
        layer.mlp.down_proj.weight = torch.nn.Parameter(layer.mlp.down_proj.weight * 2, requires_grad=False)
    pool = m.new_pool(1, 32)
    noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        assert torch.equal(m.sample_actions(pool, 0, 5, noise, fused=True),
                           m.sample_actions(pool, 0, 5, noise, fused=False))


def test_no_compiler_falls_back_to_eager_with_one_log_line(tmp_path):
    """With no C++ compiler on PATH (and CXX naming nothing) the engine runs eager; the
    reason is logged once, however many frames run."""
    script = tmp_path / "run.py"
    script.write_text(
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, format='LOG %(name)s %(message)s')\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import torch\n"
        "from engine_fixtures import observation, tiny\n"
        "from oxygen_ros.engine import native\n"
        "from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine\n"
        "model, tok = tiny()\n"
        "engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, fused=True))\n"
        "for f in range(3):\n"
        "    engine.step(observation(f), torch.zeros(10, 8))\n"
        "print('AVAILABLE', native.available())\n")
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = dict(os.environ, PATH=str(empty_bin), CXX=str(tmp_path / "no-such-c++"),
               OXYGEN_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("OXYGEN_FUSED", None)
    test_dir = Path(__file__).parent
    env["PYTHONPATH"] = os.pathsep.join([str(test_dir.parent), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, str(script), str(test_dir)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "AVAILABLE False" in out.stdout
    lines = [l for l in (out.stdout + out.stderr).splitlines() if "fused native path unavailable" in l]
    assert len(lines) == 1 and "no C++ compiler" in lines[0], out.stderr
    assert not list((tmp_path / "cache").rglob("*.so"))        # nothing was built


def test_a_build_killed_mid_way_does_not_hang_the_next_start(tmp_path):
    """A process killed while building the native library (a node stopped during its first
    start, a test run interrupted) leaves torch's `lock` file behind; torch's own waiting
    on it has no end, so every later start hung. The next one now loads the library."""
    if not native.available():
        pytest.skip(f"the native library is not built here: {native.status()}")
    build = native.cache_dir()
    cache = tmp_path / "cache"
    copied = cache / build.relative_to(build.parents[1])
    shutil.copytree(build, copied)                # the built library: no compiling needed
    (copied / "lock").write_text("")              # what the killed builder left
    env = dict(os.environ, OXYGEN_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("OXYGEN_FUSED", None)
    try:
        out = subprocess.run([sys.executable, "-m", "oxygen_ros.engine.native"], env=env, capture_output=True,
                             text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the start waited on the killed build's lock file")
    assert out.returncode == 0, out.stderr
    assert "fused action path: on" in out.stdout, out.stdout + out.stderr


def test_fused_ab_script_reports_identical_outputs():
    root = Path(__file__).parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(root / "scripts" / "fused_ab.py"), "--model", "tiny", "--rounds", "2",
                          "--frames-per-round", "2", "--tokens", "3"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "identical on vs off: actions True, texts True" in out.stdout

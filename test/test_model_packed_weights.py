"""The packed (and oneDNN-blocked) projection layout computes what the plain layers do,
and stays correct when weights change after packing."""
import copy
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from oxygen_ros.engine.layers.blocks import (ONEDNN_EXACT_ROWS, ONEDNN_MAX_ROWS, GatedMLP, Packed, onednn_tiles,
                                             packed_groups)


def _layers(seed=0, width=16):
    torch.manual_seed(seed)
    return nn.Linear(width, 8, bias=False), nn.Linear(width, 4, bias=False)


def test_packed_output_equals_the_layers_and_params_are_views():
    a, b = _layers()
    x = torch.randn(3, 16)
    ref = [a(x), b(x)]
    packed = Packed(a, b)
    packed.pack()
    assert a.weight.data_ptr() == packed.matrix.data_ptr()      # no second dense copy
    for got, want in zip(packed.apply(x), ref):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_in_place_load_after_packing_is_seen():
    a, b = _layers()
    packed = Packed(a, b)
    packed.pack()
    with torch.no_grad():
        a.weight.copy_(torch.ones_like(a.weight))             # e.g. a loader copying weights
    x = torch.randn(2, 16)
    torch.testing.assert_close(packed.apply(x)[0], x.sum(-1, keepdim=True).expand(2, 8),
                               rtol=1e-5, atol=1e-5)


def test_replaced_weights_fall_back_to_the_layers():
    a, b = _layers()
    packed = Packed(a, b)
    packed.pack()
    b.weight = nn.Parameter(torch.zeros(4, 16))                # e.g. a dtype/device change
    assert torch.equal(packed.apply(torch.randn(2, 16))[1], torch.zeros(2, 4))


def test_deep_copy_packs_its_own_layers():
    a, b = _layers()
    packed = Packed(a, b)
    packed.pack()
    twin = copy.deepcopy(packed)
    assert twin.matrix.data_ptr() != packed.matrix.data_ptr()
    assert twin.linears[0].weight.data_ptr() == twin.matrix.data_ptr()
    x = torch.randn(5, 16)
    for got, want in zip(twin.apply(x), packed.apply(x)):
        assert torch.equal(got, want)


def test_large_matrices_use_the_blocked_copy_and_drop_it_when_stale():
    a, b = _layers(width=8192)                 # 12 x 8192: above the oneDNN threshold
    packed = Packed(a, b)
    packed.pack()
    if packed.blocked is None:
        pytest.skip("oneDNN is not available in this torch build")
    x = torch.randn(3, 8192)
    torch.testing.assert_close(packed.apply(x)[0], a(x), rtol=1e-4, atol=1e-3)
    with torch.no_grad():
        b.weight.zero_()
    assert torch.equal(packed.apply(x)[1], torch.zeros(3, 4))
    assert packed.blocked is None


@pytest.mark.parametrize("width", [16, 8192])       # below / above the oneDNN threshold
def test_biased_layers_pack_with_their_biases_and_fuse_gelu(width):
    torch.manual_seed(1)
    a, b = nn.Linear(width, 8), nn.Linear(width, 4)
    x = torch.randn(3, width)
    ref = torch.cat([a(x), b(x)], dim=-1).detach()
    packed = Packed(a, b)
    packed.pack()
    assert a.bias.data_ptr() == packed.bias.data_ptr()              # biases are views too
    torch.testing.assert_close(packed.matmul(x), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(packed.matmul(x, gelu_tanh=True),
                               torch.nn.functional.gelu(ref, approximate="tanh"), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        b.bias.fill_(100.0)                                          # a loader writing in place
    assert (packed.matmul(x)[:, 8:] > 50).all()


def test_long_products_run_with_few_row_counts_and_little_padding():
    assert [onednn_tiles(m) for m in (1, 2, ONEDNN_EXACT_ROWS)] == [[1], [2], [ONEDNN_EXACT_ROWS]]
    assert onednn_tiles(33) == [36]            # a 33-token prompt: not 64 rows, nor 40
    assert onednn_tiles(174) == [176]          # smol's LIBERO prefix: not 192
    assert [onednn_tiles(m) for m in (64, 65, 129, 245)] == [[64], [72], [144], [256]]
    assert onednn_tiles(257) == [256, 32] and onednn_tiles(810) == [256, 256, 256, 44]
    sizes = set()
    for m in range(1, 4097):
        tiles = onednn_tiles(m)
        padding = sum(tiles) - m
        assert max(tiles) <= ONEDNN_MAX_ROWS, m
        assert 0 <= padding < max(ONEDNN_EXACT_ROWS, m / 8), m     # under 12.5% past a tile of 32
        assert padding == 0 or padding < tiles[-1] / 8 or tiles[-1] == ONEDNN_EXACT_ROWS, m
        sizes.update(tiles)
    assert len(sizes) == ONEDNN_EXACT_ROWS + 24     # 36 40 ... 64 72 ... 128 144 ... 256


@pytest.mark.parametrize("gelu_tanh", [False, True])
def test_padding_rows_leaves_the_results_bitwise_unchanged(gelu_tanh):
    """Padded products must equal oneDNN on the rows as they are, or oxygen's batched
    prompts would stop matching isolated ones."""
    torch.manual_seed(2)
    a, b = nn.Linear(576, 1536), nn.Linear(576, 512)
    packed = Packed(a, b)
    packed.pack(dense=False)
    if packed.blocked is None:
        pytest.skip("oneDNN is not available in this torch build")
    post, algorithm = ("gelu", "tanh") if gelu_tanh else ("none", "")
    for m in (2, 33, 100, 245, 300, 810):      # 300 and 810: several tiles
        x = torch.randn(m, 576)
        plain = torch.ops.mkldnn._linear_pointwise(x, packed.blocked, packed.bias, post, [], algorithm)
        assert torch.equal(packed.matmul(x, gelu_tanh=gelu_tanh), plain), m
        assert torch.equal(packed.matmul(x.view(1, m, 576), gelu_tanh=gelu_tanh), plain.view(1, m, -1)), m


def test_an_mlp_runs_on_the_row_tiles_padded_and_joined_once(monkeypatch):
    """A long input's MLP runs tile by tile (tiled_rows): the same values bitwise as each
    product tiling on its own, with one join (the block's output) instead of one a product."""
    torch.manual_seed(4)
    mlp = GatedMLP(256, 1024, "gelu_tanh")
    for group in packed_groups(mlp):
        group.pack(dense=False)
    if mlp._gate_up.blocked is None:
        pytest.skip("oneDNN is not available in this torch build")
    cats = []
    real_cat = torch.cat
    monkeypatch.setattr(torch, "cat", lambda *a, **k: cats.append(1) or real_cat(*a, **k))
    for m in (20, 175, 300, 597):       # one tile as is, one padded tile, two and three tiles
        x = torch.randn(1, m, 256)
        with torch.inference_mode():
            cats.clear()
            tiled = mlp(x)
            joins = len(cats)
            per_product = mlp._rows(x)
        assert torch.equal(tiled, per_product), m
        assert joins == (len(onednn_tiles(m)) > 1), (m, joins)


def test_products_of_ever_new_lengths_keep_memory_flat():
    """oneDNN keeps a primitive per row count; without the buckets the first 370 of these
    lengths grew the process by ~630 MB, with them by ~33 MB. Run alone so the RSS is this
    product's only."""
    script = textwrap.dedent("""
        import torch
        from torch import nn
        from oxygen_ros.engine.layers.blocks import Packed
        def rss_mb():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
        packed = Packed(nn.Linear(576, 2048, bias=False))
        packed.pack(dense=False)
        for m in (40, 100, 200, 300, 400):     # one primitive of each bucket size
            packed.matmul(torch.randn(m, 576))
        before = rss_mb()
        for m in [*range(33, 401), *range(401, 1200, 7)]:
            packed.matmul(torch.randn(m, 576))
        print(rss_mb() - before)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert float(out.stdout.split()[-1]) < 100, out.stdout


def test_mixed_biases_are_rejected():
    with pytest.raises(ValueError, match="bias"):
        Packed(nn.Linear(4, 2), nn.Linear(4, 2, bias=False))


def _vision_reference(enc, images):
    """SigLIP's forward written directly on the nn.Linear layers (independent of Packed)."""
    f = torch.nn.functional
    x = enc.patch_embedding(images).flatten(2).transpose(1, 2) + enc.position_embedding.weight
    for layer in enc.layers:
        att = layer.self_attn
        y = layer.layer_norm1(x)
        b, t, w = y.shape
        d = w // att.heads
        q, k, v = (p(y).view(b, t, att.heads, d).transpose(1, 2) for p in (att.q_proj, att.k_proj, att.v_proj))
        a = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1) @ v
        x = x + att.out_proj(a.transpose(1, 2).reshape(b, t, w))
        x = x + layer.mlp.fc2(f.gelu(layer.mlp.fc1(layer.layer_norm2(x)), approximate="tanh"))
    return enc.projector(enc.post_layernorm(x))


def test_packed_vision_encoder_matches_a_plain_reference():
    from oxygen_ros.engine.registry import get_config
    from oxygen_ros.engine.layers.random_init import init_random
    from oxygen_ros.engine.models.pi05.vision import VisionEncoder
    cfg = get_config("pi05-quarter").vision            # wide enough for the oneDNN path
    enc = init_random(VisionEncoder(cfg, 64), seed=3).eval()
    images = torch.rand(2, 3, cfg.image_size, cfg.image_size) * 2 - 1
    with torch.inference_mode():
        want = _vision_reference(enc, images)
        torch.testing.assert_close(enc(images), want, rtol=1e-4, atol=1e-4)   # unpacked
        for group in packed_groups(enc):
            group.pack()
        assert enc.layers[0].self_attn._qkv.blocked is not None or not torch.backends.mkldnn.is_available()
        torch.testing.assert_close(enc(images), want, rtol=1e-4, atol=1e-4)


def _lean_packed(width=8192):
    a, b = _layers(width=width)
    packed = Packed(a, b)
    packed.pack(dense=False)
    if packed.blocked is None:
        pytest.skip("oneDNN is not available in this torch build")
    return a, b, packed


def test_lean_packing_keeps_one_copy_the_blocked_one():
    a, b = _layers(width=8192)
    weights = (a.weight.data_ptr(), b.weight.data_ptr())
    x = torch.randn(3, 8192)
    ref = [a(x).detach(), b(x).detach()]
    packed = Packed(a, b)
    packed.pack(dense=False)
    if packed.blocked is None:
        pytest.skip("oneDNN is not available in this torch build")
    assert packed.matrix is None                                   # no packed dense matrix
    assert (a.weight.data_ptr(), b.weight.data_ptr()) == weights    # the layers' own weights, untouched
    for got, want in zip(packed.apply(x), ref):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
    matrix, blocked = packed.operands()                             # native code reads the blocked copy
    assert matrix.numel() == 0 and blocked is packed.blocked


def test_lean_packing_sees_in_place_writes_and_replaced_weights():
    a, b, packed = _lean_packed()
    x = torch.randn(2, 8192)
    with torch.no_grad():
        a.weight.zero_()
    assert torch.equal(packed.apply(x)[0], torch.zeros(2, 8)) and packed.blocked is None
    a2, b2, packed2 = _lean_packed()
    b2.weight = nn.Parameter(torch.ones(4, 8192))
    torch.testing.assert_close(packed2.apply(x)[1], x.sum(-1, keepdim=True).expand(2, 4), rtol=1e-4, atol=1e-2)


def test_lean_products_differentiate_with_respect_to_their_input():
    """Autograd through the blocked copy (RTC's guided sampling with no dense copy kept): the
    input's gradient equals the plain layers'. oneDNN's linear alone has no backward."""
    a, b, packed = _lean_packed()
    x, g = torch.randn(3, 8192, requires_grad=True), torch.randn(3, 12)
    (got,) = torch.autograd.grad(packed.matmul(x), x, g)
    plain = x.detach().clone().requires_grad_(True)
    (want,) = torch.autograd.grad(torch.cat([a(plain), b(plain)], dim=-1), plain, g)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_lean_deep_copy_stays_lean():
    _, _, packed = _lean_packed()
    twin = copy.deepcopy(packed)
    assert twin.matrix is None and twin.blocked is not None
    x = torch.randn(2, 8192)
    for got, want in zip(twin.apply(x), packed.apply(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _mapped_pages_kb(path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:   # a mapping's first line
                inside = len(head) == 6 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch build")
def test_weights_mapped_from_a_file_go_back_to_it(tmp_path):
    """A model whose weights are assigned from safetensors' mapped load_file (as the smol
    loader does): after pack_weights the backbone's matrices (and the tied embedding) are
    read only through their blocked copies and stay on the file, every other mapped tensor
    is copied out, and the mapping's resident pages are reclaimed; outputs do not change."""
    from safetensors.torch import load_file, save_file
    from oxygen_ros.engine.registry import get_config
    from oxygen_ros.engine.layers.random_init import init_random
    from oxygen_ros.engine.models.pi05.modeling import VLAModel
    cfg = get_config("pi05-quarter")
    model = init_random(VLAModel(cfg), seed=0).eval()
    path = tmp_path / "backbone.safetensors"
    save_file({k: v.contiguous() for k, v in model.backbone.state_dict().items()}, str(path))
    ids, x = torch.tensor([[5, 17, 42, 7]]), torch.randn(1, 4, cfg.backbone.width)
    with torch.inference_mode():
        want = model.backbone.logits(model.backbone.embed(ids)), model.backbone.layers[0].mlp(x)
    mapped = VLAModel(cfg)
    mapped.load_state_dict(model.state_dict(), strict=True)
    mapped.backbone.load_state_dict(load_file(str(path)), strict=True, assign=True)
    with torch.no_grad():                                    # touch every page, as a first use does
        sum(float(p.sum()) for p in mapped.backbone.parameters())
    before = _mapped_pages_kb(path)
    mapped.eval().pack_weights()
    layer = mapped.backbone.layers[0]
    assert layer.mlp._gate_up.blocked is not None and layer.mlp._gate_up.matrix is None
    assert _mapped_pages_kb(path) < before / 4, (before, _mapped_pages_kb(path))
    from oxygen_ros.engine.layers.mapped_weights import _file_mappings, _mapping_of
    maps = _file_mappings()
    assert _mapping_of(layer.mlp.up_proj.weight, maps) and _mapping_of(layer.self_attn.q_proj.weight, maps)
    # the tied LM head reads its blocked copy: the embedding stays on the file too, and a
    # lookup faults in the pages of its rows
    assert _mapping_of(mapped.backbone.embed_tokens.weight, maps)
    assert not _mapping_of(layer.input_layernorm.weight, maps)
    with torch.inference_mode():
        got = mapped.backbone.logits(mapped.backbone.embed(ids)), layer.mlp(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _resident_weight_bytes(model) -> int:
    """What a packed model's weights hold in this process's memory: every parameter's and
    buffer's storage in ordinary memory (once each; packed matrices are their parameters'
    storage), the oneDNN-blocked copies, and the resident pages of file mappings that hold
    weights (/proc/self/smaps)."""
    from oxygen_ros.engine.layers.mapped_weights import weight_storages
    w = weight_storages(model)
    seen, total, mapped = w.in_memory, sum(w.in_memory.values()), w.mappings
    for g in packed_groups(model):
        if g.matrix is not None and g.matrix.untyped_storage().data_ptr() not in seen:
            total += g.matrix.untyped_storage().nbytes()
        if g.blocked is not None:
            total += g.blocked.numel() * g.blocked.element_size()
    with open("/proc/self/smaps") as f:
        starts = {s for s, _ in mapped}
        inside = False
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                inside = int(head[0].split("-")[0], 16) in starts
            elif inside and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def _wide_tiny(pack: bool = True):
    """TINY with matrices large enough for oneDNN in the backbone, the tied LM head and the expert."""
    import dataclasses
    from oxygen_ros.engine.layers.random_init import init_random
    from oxygen_ros.engine.models.pi05.configuration import TINY
    from oxygen_ros.engine.models.pi05.modeling import VLAModel
    cfg = dataclasses.replace(
        TINY, backbone=dataclasses.replace(TINY.backbone, width=256, mlp_dim=1024, head_dim=64),
        expert=dataclasses.replace(TINY.expert, width=256, mlp_dim=1024))
    model = init_random(VLAModel(cfg), cfg.seed).eval()
    return model.pack_weights() if pack else model


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch build")
def test_a_packed_model_holds_each_weight_once():
    """After pack_weights the weights are resident once (issue 44): where a product reads a
    blocked copy, no dense copy of its matrix stays in memory (the backbone's, the tied LM
    head's and the action expert's alike). Before: the expert kept its packed dense matrix
    and the token embedding beside their blocked copies."""
    model = _wide_tiny()
    assert packed_groups(model.expert)[0].blocked is not None and model.backbone._head.blocked is not None
    resident = _resident_weight_bytes(model)
    assert resident <= 1.05 * model.weight_bytes(), (resident, model.weight_bytes())


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch build")
def test_blocked_layers_weights_go_to_a_file_and_read_back_unchanged(tmp_path, monkeypatch):
    """Weights in ordinary memory (random placeholders here) whose products read blocked
    copies move to a private mapping of a file that is unlinked at once; state_dict and a
    deep copy read them back unchanged. OXYGEN_WEIGHTS_ON_FILE=0 leaves them in memory."""
    from oxygen_ros.engine.layers.mapped_weights import _file_mappings, _mapping_of
    monkeypatch.setenv("OXYGEN_CACHE_DIR", str(tmp_path))
    model = _wide_tiny(pack=False)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    model.pack_weights()
    maps = _file_mappings()
    expert = model.expert.layers[0]
    assert _mapping_of(expert.mlp.up_proj.weight, maps) and _mapping_of(model.backbone.embed_tokens.weight, maps)
    assert not _mapping_of(expert.input_layernorm.dense.weight, maps)     # no blocked copy: stays in memory
    assert not list(tmp_path.iterdir())                                 # nothing left on disk
    twin = copy.deepcopy(model)       # e.g. the parallel baseline's model: packed the same way
    twin_up = twin.expert.layers[0].mlp.up_proj.weight
    assert _mapping_of(twin_up, _file_mappings()) not in (None, _mapping_of(expert.mlp.up_proj.weight, maps))
    assert twin.expert.layers[0].mlp._gate_up.blocked is not None
    for state in (model.state_dict(), twin.state_dict()):
        assert state.keys() == want.keys() and all(torch.equal(v, want[k]) for k, v in state.items())
    monkeypatch.setenv("OXYGEN_WEIGHTS_ON_FILE", "0")
    kept = _wide_tiny()
    assert not _mapping_of(kept.expert.layers[0].mlp.up_proj.weight, _file_mappings())

"""The static-buffer decode step the CUDA graphs replay: its shape buckets (CPU-testable;
the capture itself needs a GPU: scripts/cuda_check.py)."""
import torch

from engine_fixtures import tiny
from oxygen_ros.engine.decode_graphs import DecodeStep


def test_capture_all_covers_every_shape_a_frame_can_meet():
    """capture_all() records shapes(); every (live requests, read length) a decode step
    can be called with must map onto one of them, or a GPU frame would stall to capture."""
    model, _ = tiny()
    pool = model.new_pool(capacity=6, max_len=300)
    step = DecodeStep(model, pool, bucket=128, pad_rows=True)
    shapes = set(step.shapes())
    assert len(shapes) == 4 * 3          # rows 1, 2, 4, 7 x reads 128, 256, 300
    for b in range(1, pool.capacity + 1):
        for read_len in range(1, pool.max_len + 1):
            assert (step.row_bucket(b), step.read_bucket(read_len)) in shapes, (b, read_len)
    assert step.row_bucket(5) == 7 and step.read_bucket(129) == 256


def test_padded_rounded_step_equals_the_plain_decode():
    """Padding rows and over-reading masked entries change nothing for the real rows."""
    model, _ = tiny()
    pool = model.new_pool(capacity=6, max_len=64)
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        pool.k.copy_(torch.randn(pool.k.shape, generator=gen))
        pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
        ids = torch.tensor([5, 17, 99])
        lengths = torch.tensor([10, 3, 21])
        want = model.decode(ids, pool, lengths, 22)
        step = DecodeStep(model, pool, bucket=16, pad_rows=True)
        step._lengths.fill_(40)          # stale rows from an earlier, larger batch
        got = step(ids, lengths, 22)
    assert got.shape == (3,)
    assert torch.equal(got, want)

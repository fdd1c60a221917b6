"""Weights mapped from a file (safetensors' load_file maps the file copy-on-write, and a
loader that assigns those tensors as parameters keeps the mapping) should cost this process
memory only where the engine reads them.

After packing, the products of the backbone and the vision encoder read oneDNN's blocked
copies (layers/blocks.Packed, dense=False), so their mapped dense weights are read again
only if a blocked copy goes stale. `copy_out` copies every other mapped tensor (norms,
embedding rows looked up each step, unblocked layers) into ordinary memory and, once the
blocked copies are made, `reclaim` asks the kernel for the mapping's pages (MADV_PAGEOUT): clean pages return to the file and
fault back in on a later read; pages a write made private cannot be reclaimed without swap
and simply stay. Linux only; elsewhere, or on an older kernel, nothing changes.
"""
from __future__ import annotations

import ctypes
import sys

import torch
from torch import nn

MADV_PAGEOUT = 21     # Linux >= 5.4; Python's mmap module does not name it everywhere


def _file_mappings() -> list[tuple[int, int]]:
    """[start, end) of every mapping of this process backed by a regular file."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.readlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            start, end = (int(v, 16) for v in fields[0].split("-"))
            out.append((start, end))
    return out


def _mapping_of(t: torch.Tensor, mappings) -> tuple[int, int] | None:
    if t.device.type != "cpu" or t.numel() == 0:
        return None
    ptr = t.untyped_storage().data_ptr()
    return next(((s, e) for s, e in mappings if s <= ptr < e), None)


def copy_out(model: nn.Module, left_to_file: set[int]) -> list[tuple[int, int]]:
    """Copy every file-mapped parameter and buffer of `model` into ordinary memory, except
    those whose id is in `left_to_file`. Returns the mappings those still use. Call before
    packing (Packed records the weights' addresses)."""
    mappings = _file_mappings() if sys.platform.startswith("linux") else []
    if not mappings:
        return []
    kept = set()
    with torch.no_grad():
        for module in model.modules():
            tensors = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
            for name, t in tensors:
                where = _mapping_of(t, mappings)
                if where is None:
                    continue
                if id(t) in left_to_file:
                    kept.add(where)
                elif isinstance(t, nn.Parameter):
                    setattr(module, name, nn.Parameter(t.detach().clone(), requires_grad=t.requires_grad))
                else:
                    module.register_buffer(name, t.clone(), persistent=name not in module._non_persistent_buffers_set)
    return sorted(kept)


def reclaim(mappings: list[tuple[int, int]]) -> None:
    """Ask the kernel to take back the resident pages of `mappings` (see the module doc)."""
    if not mappings:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for start, end in mappings:
        if libc.madvise(start, end - start, MADV_PAGEOUT) != 0:
            return        # an older kernel: the pages stay resident, nothing else changes

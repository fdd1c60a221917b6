"""Weights mapped from a file (safetensors' load_file maps the file copy-on-write, and a
loader that assigns those tensors as parameters keeps the mapping) should cost this process
memory only where the engine reads them.

After packing, every product that runs on oneDNN reads its blocked copy (layers/blocks.Packed,
dense=False), so the layers' dense weights are read again only by state_dict, copies, or a
fallback when a blocked copy goes stale. `copy_out` copies every other mapped tensor (norms,
unblocked layers) into ordinary memory; `move_to_file` puts the blocked layers' weights that
are in ordinary memory (random placeholders, a checkpoint read into memory) into a private
mapping of a file of its own, written once and unlinked at once; once the blocked copies are
made, `reclaim` asks the kernel for the mappings' pages (MADV_PAGEOUT): clean pages return
to the file and fault back in on a later read (the tied token embedding's rows the decode
step looks up, a few pages); pages a write made private cannot be reclaimed without swap and
simply stay. `release_free_memory` gives the heap that the load and the packing freed back.
Linux (and glibc) only; elsewhere, or on an older kernel, nothing changes.
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
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


def mappings_of(tensors) -> list[tuple[int, int]]:
    """The file mappings that hold any of `tensors`."""
    maps = _file_mappings() if sys.platform.startswith("linux") else []
    return sorted({where for t in tensors if maps and (where := _mapping_of(t, maps)) is not None})


@dataclass
class WeightStorages:
    """Where a model's parameter and buffer storages live (weight_storages)."""
    in_memory: dict[int, int] = field(default_factory=dict)   # storage address -> bytes, ordinary memory
    on_file: dict[int, int] = field(default_factory=dict)     # storage address -> bytes, mapped from a file
    mappings: set[tuple[int, int]] = field(default_factory=set)   # the file mappings holding on_file


def weight_storages(model: nn.Module) -> WeightStorages:
    """Every CPU parameter's and buffer's storage of `model`, each once, split by whether a
    file mapping holds it (for memory reports: scripts/measure_rss.py, the packing tests)."""
    maps = _file_mappings() if sys.platform.startswith("linux") else []
    out = WeightStorages()
    for t in list(model.parameters()) + list(model.buffers()):
        s = t.untyped_storage()
        if t.device.type != "cpu" or s.data_ptr() in out.in_memory or s.data_ptr() in out.on_file:
            continue
        where = _mapping_of(t, maps)
        if where is None:
            out.in_memory[s.data_ptr()] = s.nbytes()
        else:
            out.on_file[s.data_ptr()] = s.nbytes()
            out.mappings.add(where)
    return out


def reclaim(mappings: list[tuple[int, int]]) -> None:
    """Ask the kernel to take back the resident pages of `mappings` (see the module doc)."""
    if not mappings:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for start, end in mappings:
        if libc.madvise(start, end - start, MADV_PAGEOUT) != 0:
            return        # an older kernel: the pages stay resident, nothing else changes


def spill_dir() -> Path:
    """Where move_to_file writes: $OXYGEN_CACHE_DIR or ~/.cache/oxygen_ros (as native/ and the
    smol cache), on disk: a tmpfs would keep the pages in memory."""
    return Path(os.environ.get("OXYGEN_CACHE_DIR") or Path.home() / ".cache" / "oxygen_ros").expanduser()


def move_to_file(model: nn.Module, ids: set[int]) -> list[tuple[int, int]]:
    """Move every CPU parameter of `model` whose id is in `ids` and that is in ordinary
    memory into one private (copy-on-write) mapping of a file, written here and unlinked at
    once (nothing is left on disk). Returns that mapping, for `reclaim`. Call before packing
    (Packed records the weights' addresses). OXYGEN_WEIGHTS_ON_FILE=0, a platform other than
    Linux, or a file that cannot be written (the weights stay where they are): []."""
    if os.environ.get("OXYGEN_WEIGHTS_ON_FILE", "1") == "0" or not sys.platform.startswith("linux"):
        return []
    mappings = _file_mappings()
    params = {id(p): p for m in model.modules() for p in m.parameters(recurse=False)
              if id(p) in ids and p.device.type == "cpu" and p.numel() and _mapping_of(p, mappings) is None}
    offsets, size = {}, 0
    for key, p in params.items():
        offsets[key] = size
        size += -(-p.numel() * p.element_size() // 4096) * 4096     # each tensor on its own pages
    if not params:
        return []
    try:
        data = _write_and_map(params, offsets, size)
    except OSError:
        return []
    with torch.no_grad():
        for module in model.modules():
            for name, p in list(module.named_parameters(recurse=False)):
                if id(p) in params:
                    n = p.numel() * p.element_size()
                    moved = torch.from_numpy(data[offsets[id(p)]:offsets[id(p)] + n]).view(p.dtype).view(p.shape)
                    setattr(module, name, nn.Parameter(moved, requires_grad=p.requires_grad))
    start = data.ctypes.data
    return [(start, start + size)]


def _write_and_map(params: dict, offsets: dict, size: int) -> np.memmap:
    directory = spill_dir()
    directory.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(dir=directory, prefix="weights-", suffix=".bin")
    try:
        with os.fdopen(fd, "wb") as f:
            for key, p in params.items():
                f.seek(offsets[key])
                f.write(p.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data)
            f.truncate(size)
        return np.memmap(path, dtype=np.uint8, mode="c", shape=(size,))
    finally:
        os.unlink(path)      # the mapping keeps the data until the weights are freed


def release_free_memory() -> None:
    """Give the heap memory glibc keeps after frees back to the kernel (malloc_trim): loading
    and packing free ~120 MB of temporaries for smol that would otherwise stay resident."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):     # not glibc
        pass

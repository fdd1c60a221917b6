"""A checkpoint directory's safetensors files, read from their headers alone (no tensor is read):
which files (model.safetensors, or the shards model.safetensors.index.json names), each file's
tensor table, and counts over a header's shapes. checkpoint.py maps what is found here to our
modules; a file that is not what it should be is a Qwen3VLCheckpointError."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from ...state_checks import short_list
from .errors import Qwen3VLCheckpointError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def element_count(shape) -> int:
    """The number of elements of a tensor of `shape` (a header's "shape" list)."""
    n = 1
    for s in shape:
        n *= int(s)
    return n


def weight_files(directory: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The safetensors files (one, or the index's shards in order) and the index's
    weight_map (None for a single file). Missing files raise FileNotFoundError naming them."""
    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise Qwen3VLCheckpointError(f"{index} has no weight_map")
        files = [directory / f for f in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} names {len(missing)} shard(s) that are not in {directory}: "
                                    f"{', '.join(missing)}")
        return files, weight_map
    single = directory / SINGLE_FILE
    if single.is_file():
        return [single], None
    raise FileNotFoundError(f"no weights in {directory}: neither {SINGLE_FILE} nor {INDEX_FILE}")


def read_header(file: Path) -> dict[str, dict]:
    """A safetensors file's tensor table {name: {"dtype", "shape", "data_offsets"}} from its
    header alone (8-byte little-endian length, then JSON); no tensor is read."""
    with open(file, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise Qwen3VLCheckpointError(f"{file} is not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 2 ** 20:
            raise Qwen3VLCheckpointError(f"{file} is not a safetensors file (header length {n})")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise Qwen3VLCheckpointError(f"{file} is not a safetensors file ({e})") from None
    header.pop("__metadata__", None)
    return header


def tensor_table(directory: Path) -> tuple[list[Path], dict[str, tuple[Path, tuple[int, ...], str]]]:
    """Every tensor's (file, shape, safetensors dtype) from the headers; the index's
    weight_map must agree with what the shards hold."""
    files, weight_map = weight_files(directory)
    table = {}
    for file in files:
        for name, info in read_header(file).items():
            table[name] = (file, tuple(info["shape"]), info["dtype"])
    if weight_map is not None:
        absent = sorted(n for n, f in weight_map.items() if n not in table or table[n][0].name != f)
        if absent:
            raise Qwen3VLCheckpointError(f"{directory / INDEX_FILE} maps {len(absent)} tensor(s) to shards that "
                                         f"do not hold them: {short_list(absent)} (e.g. {absent[0]} -> "
                                         f"{weight_map[absent[0]]})")
    return files, table

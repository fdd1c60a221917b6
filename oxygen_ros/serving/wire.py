"""openpi's websocket wire format: msgpack, with numpy arrays and scalars as tagged maps.

An array travels as the map {b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str,
b"shape": shape}, a numpy scalar as {b"__npgeneric__": True, b"data": item, b"dtype":
dtype.str}; object, void and complex dtypes are refused both ways, so nothing is ever
unpickled. Decoding checks that the bytes match the declared dtype and shape before it
builds the (read-only) array over them.

Memory: a header cannot make us allocate what it declares (msgpack bounds every length by
the bytes left in the message), but element counts are bounded by the message's size, not
its memory: each one-byte empty array becomes a Python list of ~56 bytes plus a pointer, so
a 1 MiB message of a million empty arrays takes ~62 MiB and seconds to decode. The server
therefore decodes with `Limits` from its observation schema (robot_inputs.wire_limits):
msgpack refuses any longer string, byte string, array or map at its header, and a count of
arrays and maps stops a tree of many small ones, so what a message can cost is a small
multiple of its size. `unpack` without limits (clients reading replies) keeps msgpack's
defaults.
"""
from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np

REFUSED_KINDS = "OVc"          # object, void (records), complex


class WireError(ValueError):
    """A message that is not valid openpi msgpack (said why)."""


def _encode(obj):
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in REFUSED_KINDS:
            raise WireError(f"arrays of dtype {obj.dtype} are not sent")
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        if obj.dtype.kind in REFUSED_KINDS:
            raise WireError(f"scalars of dtype {obj.dtype} are not sent")
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot pack {type(obj).__name__}")


def _dtype(text) -> np.dtype:
    try:
        dtype = np.dtype(text if isinstance(text, str) else bytes(text).decode())
    except (TypeError, ValueError, UnicodeDecodeError) as e:
        raise WireError(f"unknown dtype {text!r}") from e
    if dtype.kind in REFUSED_KINDS or dtype.hasobject:
        raise WireError(f"dtype {dtype} is refused (object, void and complex dtypes never travel)")
    return dtype


def _decode(obj: dict):
    if b"__ndarray__" in obj:
        dtype, data, shape = _dtype(obj.get(b"dtype")), obj.get(b"data"), obj.get(b"shape")
        if not isinstance(data, bytes):
            raise WireError("an array's data must be bytes")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise WireError(f"an array's shape must be non-negative ints, got {shape!r}")
        count = 1
        for n in shape:
            count *= n
        if count * dtype.itemsize != len(data):
            raise WireError(f"an array of shape {list(shape)} and dtype {dtype} needs "
                            f"{count * dtype.itemsize} bytes, the message has {len(data)}")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if b"__npgeneric__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        try:
            return dtype.type(obj.get(b"data"))
        except (TypeError, ValueError, OverflowError) as e:
            raise WireError(f"bad numpy scalar of dtype {dtype}: {e}") from e
    return obj


@dataclass(frozen=True)
class Limits:
    """The longest string (UTF-8 bytes), byte string, array and map a message may hold, and
    how many arrays and maps in all."""
    max_str_len: int
    max_bin_len: int
    max_array_len: int
    max_map_len: int
    max_containers: int


def pack(obj) -> bytes:
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpack(data: bytes, limits: Limits | None = None):
    """The message's object; WireError for anything malformed (truncated, extra bytes,
    nested deeper than msgpack's stack, arrays whose bytes do not match their header) or,
    with `limits`, beyond them (said which)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError("messages are binary msgpack, not text")
    options: dict = {"object_hook": _decode}
    if limits is not None:
        count = [0]

        def counted(obj, hook=None):
            count[0] += 1
            if count[0] > limits.max_containers:
                raise WireError(f"more than {limits.max_containers} arrays and maps in one message")
            return hook(obj) if hook else obj

        options = {"object_hook": lambda obj: counted(obj, _decode), "list_hook": counted,
                   "max_str_len": limits.max_str_len, "max_bin_len": limits.max_bin_len,
                   "max_array_len": limits.max_array_len, "max_map_len": limits.max_map_len, "max_ext_len": 0}
    try:
        # without limits, unpackb bounds every length by the data's size (msgpack >= 1.0)
        return msgpack.unpackb(data, raw=False, strict_map_key=False, **options)
    except WireError:
        raise
    except ValueError as e:
        if limits is not None and "exceeds max_" in str(e):      # msgpack's "N exceeds max_array_len(M)"
            raise WireError(f"refused at its header: {e} (longer than any value of an observation)") from e
        raise WireError(f"not valid msgpack: {type(e).__name__}: {e}") from e
    except (TypeError, msgpack.UnpackException, RecursionError) as e:
        raise WireError(f"not valid msgpack: {type(e).__name__}: {e}") from e

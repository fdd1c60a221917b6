"""openpi's websocket wire format: msgpack, with numpy arrays and scalars as tagged maps.

An array travels as the map {b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str,
b"shape": shape}, a numpy scalar as {b"__npgeneric__": True, b"data": item, b"dtype":
dtype.str}; object, void and complex dtypes are refused both ways, so nothing is ever
unpickled. Decoding checks that the bytes match the declared dtype and shape before it
builds the (read-only) array over them, and msgpack's own limits bound every string, byte
string, array and map by the message's size: a message cannot ask for more memory than it
brings.
"""
from __future__ import annotations

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


def pack(obj) -> bytes:
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpack(data: bytes):
    """The message's object; WireError for anything malformed (truncated, extra bytes,
    nested deeper than msgpack's stack, arrays whose bytes do not match their header)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError("messages are binary msgpack, not text")
    try:
        # unpackb bounds every length by the data's size (msgpack >= 1.0)
        return msgpack.unpackb(data, object_hook=_decode, raw=False, strict_map_key=False)
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
        raise WireError(f"not valid msgpack: {type(e).__name__}: {e}") from e

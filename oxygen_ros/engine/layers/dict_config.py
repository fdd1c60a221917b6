"""Dataclass configs from and to plain dicts keyed by the dataclass's own field names
(the action heads' configs; `from_hf_dict` reads a checkpoint's names instead)."""
from __future__ import annotations

from dataclasses import fields
from typing import Mapping


def check_fields(cls, names, error: type[Exception] = ValueError) -> None:
    """Raise `error` naming the keys of `names` that are not fields of `cls`, and the fields."""
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise error(f"unknown {cls.__name__} fields {unknown}; known fields: {known}")


class DictConfig:
    """Mixin for a dataclass config: `from_dict` / `to_dict`, JSON-friendly (a tuple field
    is written as a list and read back from one)."""

    @classmethod
    def from_dict(cls, d: Mapping):
        """The config from {field name: value}; missing fields keep their defaults, unknown
        keys are a ValueError naming them and the known fields."""
        if not isinstance(d, Mapping):
            raise TypeError(f"{cls.__name__}.from_dict needs a mapping, got {type(d).__name__}")
        check_fields(cls, d)
        tuples = {f.name for f in fields(cls) if "tuple" in str(f.type)}
        return cls(**{k: tuple(v) if k in tuples and isinstance(v, list) else v for k, v in d.items()})

    def to_dict(self) -> dict:
        """{field name: value} for every field (tuples as lists); from_dict reads it back."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

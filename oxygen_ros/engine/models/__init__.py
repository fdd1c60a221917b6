"""The model families, one folder each (engine/registry.py finds them by name)."""

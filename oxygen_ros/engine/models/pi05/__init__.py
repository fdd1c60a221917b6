"""pi0.5 (PaliGemma backbone, SigLIP vision, the action expert joining attention layer by
layer): its profiles, network, openpi / LeRobot checkpoint reading, policy I/O (processor)
and PaliGemma tokenizer. What the registry and the node use of it:"""
from .checkpoint import CheckpointError, inspect_checkpoint
from .configuration import PROFILES
from .loading import load
from .policy_io_hooks import build_policy_io, fit_model, serve_policy_io
from .processor import PolicyIO, load_policy_io

__all__ = ["CheckpointError", "PROFILES", "PolicyIO", "build_policy_io", "fit_model", "inspect_checkpoint", "load",
           "load_policy_io", "serve_policy_io"]

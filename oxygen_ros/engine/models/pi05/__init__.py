"""pi0.5 (PaliGemma backbone, SigLIP vision, the action expert joining attention layer by
layer): its profiles, network, openpi / LeRobot checkpoint reading, policy I/O (processor)
and PaliGemma tokenizer. What the registry and the node use of it:"""
from .checkpoint import CheckpointError, inspect_checkpoint
from .configuration import PROFILES
from .loading import load
from .processor import PolicyIO, load_policy_io

__all__ = ["CheckpointError", "PROFILES", "PolicyIO", "inspect_checkpoint", "load", "load_policy_io"]

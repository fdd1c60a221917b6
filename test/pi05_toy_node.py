"""oxygen_node with the `pi05` profile at toy widths (pi05_fixtures.toy_config).

A labelled test double for one thing only: the 3B-parameter pi0.5 cannot run in a test
here, so the profile's widths are swapped for toy ones before the node starts. The rest
is the real path a user runs: load_pi05 reading a checkpoint directory with the real
tensor names, its policy I/O, and `oxygen_node` itself.

    OXYGEN_TEST_TOKENIZER=<sentencepiece model> python test/pi05_toy_node.py --ros-args ...
"""
import dataclasses
import os
import sys

from oxygen_ros.engine.models.pi05 import configuration as config
from oxygen_ros.engine.models.pi05.tokenizer import SentencePieceTokenizer
from pi05_fixtures import toy_config

config.PROFILES["pi05"] = dataclasses.replace(
    toy_config(SentencePieceTokenizer(os.environ["OXYGEN_TEST_TOKENIZER"])), name="pi05")

from oxygen_ros.node.oxygen_node import main  # noqa: E402 - after the profile swap

sys.exit(main())

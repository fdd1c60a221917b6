"""The ROS-free engine (torch + numpy, never rclpy): the data path the node runs.

At this level (the core): requests, the frame scheduler, the KV pool, the GPU path, frame
results, one robot's language life, the model registry and factory. text/ holds the
tokenizers, chat templates, prompts and memory log; observation/ a frame's input and camera
views; layers/ the shared building blocks, models/ one folder per model family (found
through registry.py), policy_io/ what every family's policy I/O shares, bench/ what
measures the engine (the node never imports bench/). docs/engine.md "Rooms" has the
import rules.
"""

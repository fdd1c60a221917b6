"""The ROS-free engine (torch + numpy, never rclpy): the data path the node runs.

At this level (the core): observations, requests, the frame scheduler, the KV pool, the GPU
path, frame results, the tokenizer protocol and the model registry. layers/ holds the
shared building blocks, models/ one folder per model family (found through registry.py),
policy_io/ what every family's policy I/O shares, bench/ what measures the engine (the node
never imports bench/). docs/engine.md "Rooms" has the import rules.
"""

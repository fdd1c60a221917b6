"""The ROS-free engine (torch + numpy, never rclpy): the data path the node runs.

At this level: observations, requests, the frame scheduler, the KV pool, the GPU path
(decode graphs, transfers), frame results, the tokenizer protocol and the profiles.
model/ is the network, weights/ what a profile loads, bench/ what measures the engine
(the node never imports bench/).
"""

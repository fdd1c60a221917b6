"""A control frame's input, ROS-free: the `Observation` and how it becomes the model's
prefix (observation.py), and the per-camera view transforms applied to an image before
the model's resize (camera_view.py). Imports nothing else of the package."""

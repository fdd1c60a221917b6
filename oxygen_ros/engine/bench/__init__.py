"""What measures the engine (`oxygen bench`): the runner, the baselines it compares, roofline, workloads."""

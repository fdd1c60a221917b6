"""The library behind `oxygen record | report | sim | demo`: bags, reports, the simulated robot, the demo."""

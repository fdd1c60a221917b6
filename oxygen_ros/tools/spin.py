"""The main loop of the `oxygen` ROS tools (sim, record): spin until told to stop."""
import threading
import time


def spin_until_stopped(executor, stop: threading.Event, duration_s: float, status=None,
                       every_s: float = 10.0) -> None:
    """Spin `executor` until `stop` is set or `duration_s` seconds have passed (0 = no
    limit), calling status(elapsed_s) every `every_s` seconds (status None = quiet)."""
    t0 = last = time.monotonic()
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.05)
        now = time.monotonic()
        if duration_s and now - t0 >= duration_s:
            return
        if status is not None and now - last >= every_s:
            last = now
            status(now - t0)

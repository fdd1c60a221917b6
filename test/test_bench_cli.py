"""`oxygen bench` runs every mode side by side and reports the documented fields."""
import json
import statistics
import time

from oxygen_ros.engine.bench.runner import round_sizes

from oxygen_ros.cli import main

FIELDS = {"action_hz", "lang_tokens_per_s", "frame_ms_median", "frame_ms_p95", "prefill_ms",
          "action_ms", "admit_ms", "decode_ms", "peak_rss_bytes", "kv_bytes", "warmup_frames"}


def test_bench_reports_every_mode_and_exactness(tmp_path, capsys):
    out = tmp_path / "bench.json"
    status = main(["bench", "--model", "tiny", "--workload", "aloha", "--frames", "4", "--tokens", "6",
                   "--steps-per-frame", "2", "--rounds", "2", "--json", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert set(report["modes"]) == {"sequential", "shared", "oxygen", "parallel"}
    for mode, metrics in report["modes"].items():
        assert FIELDS <= set(metrics), mode
        assert metrics["action_hz"] > 0
    assert report["modes"]["oxygen"]["warmup_frames"] == 3 + 3     # ceil(6/2) + 3
    ex = report["exactness"]
    assert ex["requests_compared"] >= 4
    assert ex["text_mismatched_requests"] == 0
    assert ex["max_action_abs_diff"] <= 1e-5
    assert "oxygen/sequential" in report["ratios"]
    # interleaved: 4 frames in 2 rounds per mode, a ratio per round, the median reported
    for mode, rounds in report["rounds"].items():
        assert [r["frames"] for r in rounds] == [2, 2], mode
    per_round = report["round_ratios"]["oxygen/sequential"]["action_hz"]
    assert len(per_round) == 2
    assert report["ratios"]["oxygen/sequential"]["action_hz"] == statistics.median(per_round)
    assert report["ratio_spread"]["oxygen/sequential"]["action_hz"] == [min(per_round), max(per_round)]
    assert "exactness (oxygen vs sequential)" in capsys.readouterr().out


def test_bench_rejects_unknown_mode(capsys):
    assert main(["bench", "--modes", "oxygen,turbo"]) == 2
    assert "turbo" in capsys.readouterr().err


def test_round_sizes_split_the_frames_evenly():
    assert round_sizes(10, 4) == [3, 3, 2, 2]
    assert round_sizes(3, 8) == [1, 1, 1]          # never an empty round
    assert sum(round_sizes(40, 8)) == 40


def test_parallel_worker_holds_while_paused():
    """Outside its rounds the parallel mode's language worker must not steal CPU from the others."""
    from oxygen_ros.engine.bench.baselines import ParallelEngine
    from oxygen_ros.engine.requests import LanguageRequest
    from engine_fixtures import observation, tiny

    model, tok = tiny()
    eng = ParallelEngine(model, tok)
    try:
        eng.pause()
        eng.submit(LanguageRequest("hello", "narration", 4, ignore_eos=True))
        eng.step(observation(0))
        time.sleep(0.5)
        assert eng._out.empty(), "the worker decoded while paused"
        eng.resume()
        deadline = time.monotonic() + 10
        while eng._out.empty() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not eng._out.empty(), "the worker did not resume"
    finally:
        eng.close()


def test_bench_fused_on_and_off_are_recorded(tmp_path):
    from oxygen_ros.engine import native
    for choice in ("off", "on"):
        out = tmp_path / f"bench-{choice}.json"
        assert main(["bench", "--model", "tiny", "--modes", "sequential,oxygen", "--frames", "2", "--tokens", "2",
                     "--rounds", "1", "--fused", choice, "--json", str(out)]) == 0
        report = json.loads(out.read_text())
        assert report["settings"]["fused"] is (choice == "on")
        assert report.get("fused_active", False) is (choice == "on" and native.available())
        assert report["exactness"]["max_action_abs_diff"] == 0.0


def test_profile_frame_script_splits_the_frame_into_products_and_the_rest():
    """scripts/profile_frame.py: per-op self times of profiled oxygen frames, the products
    (what the kernel floor times) apart from everything else."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(root / "scripts" / "profile_frame.py"), "--model", "tiny",
                          "--frames", "2", "--tokens", "3"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    split = re.search(r"matrix products ([\d.]+) ms, everything else ([\d.]+) ms", out.stdout)
    assert split and float(split.group(1)) > 0 and float(split.group(2)) > 0, out.stdout
    assert "(product)" in out.stdout and "scaled_dot_product" in out.stdout


def test_bench_robots_compares_fleet_and_separate_engines_exactly(tmp_path, capsys):
    """`--robots 1,2`: per N a fleet and a separate entry with the documented fields, one
    ratio per interleaved round, and each robot's chunks and texts equal in both."""
    out = tmp_path / "fleet.json"
    status = main(["bench", "--model", "tiny", "--robots", "1,2", "--frames", "4", "--tokens", "6",
                   "--steps-per-frame", "2", "--rounds", "2", "--json", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert set(report["robots"]) == {"1", "2"}
    for n, r in report["robots"].items():
        for side in ("fleet", "separate"):
            m = r[side]
            assert {"chunk_hz_per_robot", "chunk_latency_ms_p50", "tokens_per_s"} <= set(m), (n, side)
            assert m["chunk_hz_per_robot"] > 0 and m["tokens_per_s"] > 0 and m["frames_per_robot"] == 4
        e = r["exactness"]
        assert e["requests_compared"] >= 4 * int(n)
        assert e["text_mismatched_requests"] == 0
        assert e["max_action_abs_diff"] <= 1e-5
        lo, hi = r["chunk_hz_ratio_spread"]
        assert lo <= r["chunk_hz_ratio_median"] <= hi
    assert "fleet/separate chunk rate" in capsys.readouterr().out

"""`oxygen bench` runs every mode side by side and reports the documented fields."""
import json

from oxygen_ros.cli import main

FIELDS = {"action_hz", "lang_tokens_per_s", "frame_ms_median", "frame_ms_p95", "prefill_ms",
          "action_ms", "admit_ms", "decode_ms", "peak_rss_bytes", "kv_bytes", "warmup_frames"}


def test_bench_reports_every_mode_and_exactness(tmp_path, capsys):
    out = tmp_path / "bench.json"
    status = main(["bench", "--model", "tiny", "--workload", "aloha", "--frames", "4", "--tokens", "6",
                   "--steps-per-frame", "2", "--json", str(out)])
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
    assert "exactness (oxygen vs sequential)" in capsys.readouterr().out


def test_bench_rejects_unknown_mode(capsys):
    assert main(["bench", "--modes", "oxygen,turbo"]) == 2
    assert "turbo" in capsys.readouterr().err

"""`eagle-trt perf load`: the eagle/base ratios and table from per-run rows, and its option checks. The AIPerf
runs themselves are exercised by the server-marked perf tests and by the README's concurrency table."""

import math

from click.testing import CliRunner

from eagle_trt.cli import main
from eagle_trt.perf.load import T_975, _ratios, load_table, ratio_interval


def _row(model, level, mode, p50, tps, texts):
    return {"model": model, "concurrency": level, "mode": mode, "requests": len(texts), "latency_p50_ms": p50,
            "latency_p99_ms": 2 * p50, "ttft_p50_ms": 10.0, "output_tokens_per_s": tps, "texts": texts}


def test_ratios_and_table():
    rows = [_row("eagle_model", 1, "alone", 500.0, 60.0, ["a", "b"]),
            _row("base_model", 1, "alone", 750.0, 40.0, ["b", "a"]),
            _row("eagle_model", 4, "mixed", 2000.0, 30.0, ["a", "c"]),
            _row("base_model", 4, "mixed", 1000.0, 60.0, ["a", "b"])]
    ratios = _ratios(rows)
    assert [(r["concurrency"], r["mode"]) for r in ratios] == [(1, "alone"), (4, "mixed")]
    assert ratios[0]["throughput_ratio"] == 1.5 and ratios[0]["p50_latency_ratio"] == 500.0 / 750.0
    assert ratios[0]["identical"] and not ratios[1]["identical"]  # order-free; a differing text is caught
    table = load_table({"rows": rows, "ratios": ratios}).splitlines()
    assert table[2] == "| 1 | alone | 500 / 1000 | 750 / 1500 | 60.0 | 40.0 | 1.50x | - | yes |"
    assert table[3].endswith("| 0.50x | - | NO |")  # one round: no interval
    # a pytorch bundle's report names what its ratios ran under, above the table
    settings = {"load_policy": "chain:1+suffix:4,8;chain:1;none", "backoff": "batches of 2 or more"}
    table = load_table({"settings": settings, "rows": rows, "ratios": ratios}).splitlines()
    assert table[0] == ("eagle_engine: trees by batch size chain:1+suffix:4,8;chain:1;none; "
                        "backoff: batches of 2 or more")
    assert table[1] == "" and table[4] == "| 1 | alone | 500 / 1000 | 750 / 1500 | 60.0 | 40.0 | 1.50x | - | yes |"


def test_rounds_take_medians_and_show_each_rounds_ratio():
    rows = []
    for rnd, (e, b) in enumerate([(60.0, 40.0), (30.0, 50.0), (66.0, 60.0)]):
        rows += [dict(_row("eagle_model", 2, "alone", 100.0 + rnd, e, ["a"]), round=rnd),
                 dict(_row("base_model", 2, "alone", 200.0, b, ["a"] if rnd < 2 else ["z"]), round=rnd)]
    (ratio,) = _ratios(rows)
    assert ratio["rounds"] == 3 and ratio["eagle_tokens_per_s"] == 60.0 and ratio["base_tokens_per_s"] == 50.0
    assert ratio["throughput_ratio"] == 60.0 / 50.0 and ratio["eagle_latency_p50_ms"] == 101.0
    assert ratio["round_ratios"] == [1.5, 0.6, 1.1]
    assert not ratio["identical"]  # round 3's base text differs
    logs = [math.log(1.5), math.log(0.6), math.log(1.1)]
    mean = sum(logs) / 3
    half = 4.303 * math.sqrt(sum((x - mean) ** 2 for x in logs) / 2) / math.sqrt(3)  # t(2) = 4.303
    assert math.isclose(ratio["ratio_geomean"], math.exp(mean))
    assert [round(x, 6) for x in ratio["ratio_interval_95"]] == [round(math.exp(mean - half), 6),
                                                                 round(math.exp(mean + half), 6)]
    assert ratio["verdict"] == "tie"  # 0.6 and 1.5 in three rounds resolve nothing
    low, high = ratio["ratio_interval_95"]
    assert load_table({"ratios": [ratio]}).splitlines()[2] == \
        f"| 2 | alone | 101 / 202 | 200 / 400 | 60.0 | 50.0 | 1.20x (1.50 0.60 1.10) | {low:.2f}-{high:.2f}x, tie | NO |"


def test_interval_verdicts_follow_the_rounds():
    assert ratio_interval([1.2, 1.5]) == {}  # two rounds: none
    faster = ratio_interval([1.21, 1.19, 1.24, 1.18])
    assert faster["verdict"] == "faster" and 1.0 < faster["ratio_interval_95"][0] < 1.2 < faster["ratio_interval_95"][1]
    assert ratio_interval([0.95, 0.97, 0.96, 0.94])["verdict"] == "slower"
    tie = ratio_interval([0.96, 1.01, 1.02, 0.87, 0.95, 1.02])  # the six served rounds at 4 streams, 2026-11-30
    assert tie["verdict"] == "tie" and tie["ratio_interval_95"][0] < 0.97 < 1.0 < tie["ratio_interval_95"][1]
    # more rounds of the same spread narrow the interval (smaller t and standard error)
    def width(ratios):
        low, high = ratio_interval(ratios)["ratio_interval_95"]
        return high - low
    assert width([0.96, 1.04] * 8) < width([0.96, 1.04, 1.0]) / 3


def test_t_table_is_students_975_quantile():
    def tail_mass(t, df, steps=4000):  # P(0 < T < t) by Simpson's rule on Student's density
        c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
        f = [c * (1 + (t * i / steps) ** 2 / df) ** (-(df + 1) / 2) for i in range(steps + 1)]
        return t / steps / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))
    assert len(T_975) == 30
    for df, t in enumerate(T_975, start=1):
        assert abs(tail_mass(t, df) - 0.475) < 2e-4, (df, t)


def test_bad_levels_are_usage_errors(tmp_path):
    for value in ("1,x", "0,2"):
        result = CliRunner().invoke(main, ["perf", "load", str(tmp_path), "--concurrency", value])
        assert result.exit_code == 2 and "--concurrency" in result.output and value in result.output

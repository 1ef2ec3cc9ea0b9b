"""`eagle-trt perf load`: the eagle/base ratios and table from per-run rows, and its option checks. The AIPerf
runs themselves are exercised by the server-marked perf tests and by the README's concurrency table."""

from click.testing import CliRunner

from eagle_trt.cli import main
from eagle_trt.perf.load import _ratios, load_table


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
    assert table[2] == "| 1 | alone | 500 / 1000 | 750 / 1500 | 60.0 | 40.0 | 1.50x | yes |"
    assert table[3].endswith("| 0.50x | NO |")
    # a pytorch bundle's report names what its ratios ran under, above the table
    settings = {"load_policy": "chain:1+suffix:4,8;chain:1;none", "backoff": "batches of 2 or more"}
    table = load_table({"settings": settings, "rows": rows, "ratios": ratios}).splitlines()
    assert table[0] == ("eagle_engine: trees by batch size chain:1+suffix:4,8;chain:1;none; "
                        "backoff: batches of 2 or more")
    assert table[1] == "" and table[4] == "| 1 | alone | 500 / 1000 | 750 / 1500 | 60.0 | 40.0 | 1.50x | yes |"


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
    assert load_table({"ratios": [ratio]}).splitlines()[2] == \
        "| 2 | alone | 101 / 202 | 200 / 400 | 60.0 | 50.0 | 1.20x (1.50 0.60 1.10) | NO |"


def test_bad_levels_are_usage_errors(tmp_path):
    for value in ("1,x", "0,2"):
        result = CliRunner().invoke(main, ["perf", "load", str(tmp_path), "--concurrency", value])
        assert result.exit_code == 2 and "--concurrency" in result.output and value in result.output

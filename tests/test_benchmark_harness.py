"""The GPU benchmark scripts run end to end on the fake device (``test_launcher_fakes.FakeBackend``,
which emulates every launch), so a script error shows up here and not after a device start: H200
runs W4 and W6 each lost an attempt to one (a calibrate sample without its pool, a summary that
shadowed the script's arguments). Numbers here mean nothing; that the scripts finish, verify every
launch and write their records does."""

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT / "benchmarks"))

import test_launcher_fakes as F  # noqa: E402

HEADER = ["name", "n", "in_channels", "out_channels", "groups", "d", "h", "w", "z", "y", "x", "stride", "padding", "dilation",
          "dtype", "dw_dtype", "precision", "regime"]  # fmt: skip


@pytest.fixture(scope="module")
def fake_cache():
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    return c


@pytest.fixture
def fake_device(monkeypatch, fake_cache):
    """The scripts' device and cache: ``timing_device`` and ``Cache`` answer with the fakes."""
    import compare_auto_tuned

    from skwgrad.launcher.select import backend_occupancy

    be = F.FakeBackend(cus=132, max_active=2)
    monkeypatch.setattr(compare_auto_tuned, "timing_device", lambda: (be, backend_occupancy(be), None))
    monkeypatch.setattr("skwgrad.cache.store.Cache", lambda *a, **k: fake_cache)
    return be


def _corpus(path: Path, rows: list[dict]) -> str:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        w.writeheader()
        for r in rows:
            w.writerow({"d": 1, "z": 1, "dilation": 1, "dw_dtype": "", "precision": "", "regime": "test", "dtype": "bf16", **r})
    return str(path)


DEPTHWISE = [
    dict(name="dw15", n=2, in_channels=32, out_channels=32, groups=32, h=15, w=15, y=3, x=3, stride=1, padding=1),
    dict(name="dw14", n=2, in_channels=32, out_channels=32, groups=32, h=14, w=14, y=3, x=3, stride=1, padding=1),
]
# a dilated layer: the stride-1 strips (win7r3, win5r3) do not admit it and must not be offered (run X8)
DILATED = dict(name="dw14d2", n=2, in_channels=32, out_channels=32, groups=32, h=14, w=14, y=3, x=3, stride=1, padding=2, dilation=2)


def test_dwconv_tma_ab_times_the_family_against_the_window_kernel(tmp_path, monkeypatch, fake_device):
    import gpu_dwconv_tma_ab

    rows = [dict(name="dw256", n=2, in_channels=256, out_channels=256, groups=256, h=9, w=9, y=3, x=3, stride=1, padding=1),
            dict(name="dw32", n=2, in_channels=32, out_channels=32, groups=32, h=9, w=9, y=3, x=3, stride=1, padding=1)]  # fmt: skip
    out = tmp_path / "ab.json"
    _run(monkeypatch, gpu_dwconv_tma_ab, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", rows), "--out", str(out),
                                          "--rounds", "1", "--iters", "1"])  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["summary"]["all_ok"] and doc["summary"]["tma_rows"] == 1
    big, small = doc["rows"]
    assert big["rows"]["auto"]["family"] == "dwconv_tma" and big["rows"]["window"]["family"] == "dwconv"
    assert set(small["rows"]) == {"auto", "tma"} and small["rows"]["auto"]["family"] == "dwconv"  # the rule's other side, timed
    assert small["rows"]["tma"]["family"] == "dwconv_tma" and small["rows"]["tma"]["ok"]


def _run(monkeypatch, module, argv):
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    module.main()


def test_window_ab_times_both_strips_and_writes_its_summary(tmp_path, monkeypatch, fake_device):
    import gpu_dw_window_ab

    out = tmp_path / "ab.json"
    _run(monkeypatch, gpu_dw_window_ab, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", DEPTHWISE + [DILATED]), "--out", str(out),
                                         "--rounds", "1", "--iters", "1"])  # fmt: skip
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 3 and doc["summary"]["all_ok"]
    assert {v["kernel"].split("_")[-2] for v in doc["rows"][2]["rows"].values()} == {"win7r3d2"}
    for r in doc["rows"][:2]:
        modes = {v["kernel"].split("_")[-2] for v in r["rows"].values()}
        assert {"win7r3", "win5r3"} <= modes  # the default's strip is timed whatever auto takes
    assert "win7r3_over_win5r3_geomean" in doc["summary"]
    # tiny layers: the rule before the split filled the SMs gives another degree, timed beside it
    assert all(any(k.endswith("_ksold") for k in r["rows"]) for r in doc["rows"][:2])
    assert doc["summary"]["ksold_over_rule_launches"] >= 2


def test_fused_ab_runs_without_the_fused_kernels(tmp_path, monkeypatch, fake_device):
    import gpu_fused_ab

    out = tmp_path / "fused.json"
    _run(monkeypatch, gpu_fused_ab, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", DEPTHWISE[:1]), "--out", str(out),
                                     "--rounds", "1", "--iters", "1", "--no-end-to-end"])  # fmt: skip
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 1 and doc["rows"][0]["all_ok"] and doc["summary"]["fused_rows"] == 0


def test_tma_auto_times_every_family_and_writes_its_summary(tmp_path, monkeypatch, fake_device):
    import gpu_tma_auto

    dense = [dict(name="d1x1", n=4, in_channels=64, out_channels=64, groups=1, h=14, w=14, y=1, x=1, stride=1, padding=0),
             dict(name="g3x3", n=2, in_channels=64, out_channels=64, groups=4, h=14, w=14, y=3, x=3, stride=1, padding=1)]  # fmt: skip
    out = tmp_path / "tma.json"
    _run(monkeypatch, gpu_tma_auto, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", dense), "--out", str(out),
                                     "--top", "2", "--top-old", "2", "--rounds", "1", "--iters", "1", "--no-end-to-end"])  # fmt: skip
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 2 and all(r["all_ok"] for r in doc["rows"])
    assert any(v["family"] == "wgrad_tma" for r in doc["rows"] for v in r["rows"].values())
    assert doc["summary"]["rows"] == 2


def test_tma_auto_times_auto_without_the_fill_ceiling_and_trial_kernels_apart(tmp_path, monkeypatch, fake_device):
    """--prev-no-fill-ceiling adds auto_prev; --extra times the named kernels as trial<i> only:
    auto, the other entrants and the row's best never take them (what the shipped default gives)."""
    import gpu_tma_auto

    from skwgrad.abi import costmodel as M

    dense = [dict(name="d3x3", n=8, in_channels=256, out_channels=256, groups=1, h=28, w=28, y=3, x=3, stride=1, padding=1)]
    out = tmp_path / "tma.json"
    sub = "128x128x64_t1_w8s4"
    _run(monkeypatch, gpu_tma_auto, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", dense), "--out", str(out),
                                     "--top", "2", "--rounds", "1", "--iters", "1", "--no-end-to-end", "--prev-no-fill-ceiling",
                                     "--extra", sub, "--extra-n", "2", "--prev-constant", "main_iter_tma_partial_box=0"])  # fmt: skip
    assert M.TMA_FILL_CEILING["sm_90"] > 0  # put back after each auto_prev
    row = json.loads(out.read_text())["rows"][0]
    trials = {k: v for k, v in row["rows"].items() if k.startswith("trial")}
    assert len(trials) == 2 and all(sub in v["kernel"] and v["ok"] for v in trials.values())
    assert "auto_prev" in row["rows"] and row["auto_prev_us"]
    shipped = {k: v for k, v in row["rows"].items() if not k.startswith("trial")}
    assert not any(sub in v["kernel"] for v in shipped.values())
    assert row["best_us"] == min(v["us"] for v in shipped.values()) and row["trial_best_us"] == min(v["us"] for v in trials.values())


def test_compare_auto_tuned_times_autos_launch_in_the_tuning_run():
    """auto's own launch, looked up in the dry run that timed every candidate: found for every row
    of W4's records, and never faster than that run's fastest (it is one of the candidates)."""
    from compare_auto_tuned import compare
    from results_io import read_json

    res = ROOT / "benchmarks" / "results"
    for auto, every in (("auto_2026120483_2026-12-04_w4.json", "all_2026120483_2026-12-04_w4.json"),
                        ("auto_g_2026120483_2026-12-04_w4.json", "all_g_2026120483_2026-12-04_w4.json")):  # fmt: skip
        rows, s = compare(read_json(res / auto), read_json(res / every))
        assert s["in_run_compared"] == s["rows"] == len(rows) > 0
        assert all(r["auto_in_run_over_tuned"] >= 1.0 for r in rows)
        assert s["auto_in_run_within_5pct_of_tuned"] <= s["in_run_compared"]


def test_tma_3d_ab_times_auto_before_and_both_families_on_3d_rows_only(tmp_path, monkeypatch, fake_device):
    import gpu_tma_3d_ab

    rows = [dict(name="c3d", n=2, in_channels=64, out_channels=64, groups=1, d=6, h=10, w=10, z=3, y=3, x=3, stride=1, padding=1),
            dict(name="spatial_s2", n=2, in_channels=32, out_channels=64, groups=1, d=4, h=12, w=12, z=1, y=3, x=3, stride="1x2x2",
                 padding="0x1x1"),
            dict(name="flat", n=2, in_channels=64, out_channels=64, groups=1, h=14, w=14, y=3, x=3, stride=1, padding=1)]  # fmt: skip
    out = tmp_path / "ab3d.json"
    _run(monkeypatch, gpu_tma_3d_ab, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", rows), "--out", str(out),
                                      "--rounds", "1", "--iters", "1", "--top", "2", "--top-other", "1", "--prev-3d-price", "0.5"])  # fmt: skip
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert [r["name"] for r in doc["rows"]] == ["c3d", "spatial_s2"]  # the 2-D row is not this script's
    assert all("auto_prev" in r["rows"] for r in doc["rows"]) and s["auto_prev_over_auto"] is not None
    assert s["all_ok"] and s["timed"] == 2
    for r in doc["rows"]:
        assert {"auto", "before", "tma_0", "tma_1", "other_0"} <= set(r["rows"])
        assert r["rows"]["before"]["family"] != "wgrad_tma" and r["rows"]["tma_0"]["family"] == "wgrad_tma"
        assert "_3d_" in r["rows"]["tma_0"]["kernel"]
    assert s["best_other_over_best_tma"] is not None and s["auto_within_5pct_of_best"] <= 2


def test_tma_regs_ab_times_twins_and_before_and_writes_its_summary(tmp_path, monkeypatch, fake_device, fake_cache):
    import dataclasses

    import gpu_tma_regs_ab

    # the one-CTA builds of the default's several-CTA kernels: what `before` and the o1 launches run (added to
    # the module's cache: this test is the file's last)
    for e in list(fake_cache.find("sm_90", family="wgrad_tma")):
        if e.spec.max_regs:
            fake_cache.add(dataclasses.replace(e.spec, max_regs=0), "sm_90")
    rows = [dict(name="g16", n=4, in_channels=256, out_channels=256, groups=16, h=14, w=14, y=3, x=3, stride=1, padding=1),
            dict(name="dense", n=8, in_channels=64, out_channels=128, groups=1, h=28, w=28, y=3, x=3, stride=1, padding=1)]  # fmt: skip
    out = tmp_path / "ab.json"
    _run(monkeypatch, gpu_tma_regs_ab, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", rows), "--out", str(out),
                                        "--rounds", "1", "--iters", "1", "--top", "1"])  # fmt: skip
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert s["all_ok"] and s["rows"] == 2 and s["pairs"] == 2
    assert all({"auto", "before"} <= set(r["rows"]) for r in doc["rows"])
    assert s["same_launch_pairs"] >= 1  # a one-CTA launch timed beside its several-CTA twin


def test_tma_bk_ab_times_each_launch_beside_its_128_row_twin(tmp_path, monkeypatch, fake_device, fake_cache):
    import gpu_tma_bk_ab
    from build_tma_bk_twins import bk_twin, twins

    # the 128-row twins of the default's TMA kernels (added to the module's cache: this test is the file's last)
    for s in twins(fake_cache, "sm_90"):
        fake_cache.add(s, "sm_90")
    assert all(bk_twin(s).bk == 128 and bk_twin(s).num_stages == max(2, s.num_stages // 2)
               for s in (e.spec for e in fake_cache.find("sm_90", family="wgrad_tma") if e.spec.bk == 64))  # fmt: skip
    rows = [dict(name="dense", n=8, in_channels=128, out_channels=128, groups=1, h=28, w=28, y=3, x=3, stride=1, padding=1),
            dict(name="c3d", n=2, in_channels=64, out_channels=64, groups=1, d=6, h=10, w=10, z=3, y=3, x=3, stride=1, padding=1)]  # fmt: skip
    out = tmp_path / "bk.json"
    _run(monkeypatch, gpu_tma_bk_ab, ["--cache", "x", "--corpus", _corpus(tmp_path / "c.csv", rows), "--out", str(out),
                                      "--rounds", "1", "--iters", "1", "--top", "2"])  # fmt: skip
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert s["all_ok"] and s["rows"] == 2 and s["pairs"] >= 2
    for r in doc["rows"]:
        assert {"auto", "before", "o1_0", "o2_0"} <= set(r["rows"])
        assert "x64_" in r["rows"]["o1_0"]["kernel"] and "x128_" in r["rows"]["o2_0"]["kernel"]
        assert "x128_" not in r["rows"]["before"]["kernel"]

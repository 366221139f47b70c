"""Scenario loading/schema checks, the journal file, the CLI and the subprocess helper."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import uiautomator2 as u2
import yaml

from cmbuyer.phonesim import ScenarioError, assert_order_counts, load_scenario, read_journal
from cmbuyer.phonesim.cli import main
from cmbuyer.phonesim.testing import adb_env, running_sim, running_sim_process

from .helpers import center, submit_node, walk_to_confirm

GOODS = "937122477375"


def test_default_scenario():
    scen = load_scenario()
    cfg = scen.for_phone("sim-1")
    assert (cfg.app.version_name, cfg.app.version_code) == ("8.17.0", 81700)
    goods = cfg.catalogue[GOODS]
    assert [d.name for d in goods.dimensions] == ["颜色", "尺码"]
    assert str(goods.sku({"颜色": "黑色CHA(纯棉)", "尺码": "M(建议100-115)"}).price) == "12.88"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("catalogue"), "catalogue"),
        (lambda d: d["catalogue"][0].update(goods_id="abc"), "goods_id"),
        (lambda d: d["catalogue"][0]["skus"][0].update(price="12.888"), "price"),
        (lambda d: d["catalogue"][0]["skus"][0].update(options=["紫色", "M(建议100-115)"]), "not an option"),
        (lambda d: d.update(outcome="REFUNDED"), "outcome"),
        (lambda d: d.update(faults=[{"kind": "meteor"}]), "faults"),
        (lambda d: d.update(faults=[{"kind": "price_change"}]), "missing"),
        (lambda d: d.update(unknown_key=1), "unknown_key"),
    ],
)
def test_invalid_scenarios_are_rejected(mutate, message):
    data = load_scenario().data
    mutate(data)
    with pytest.raises(ScenarioError, match=message):
        load_scenario(data)


def test_yaml_and_json_files(tmp_path):
    data = load_scenario().data
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    (tmp_path / "s.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    assert load_scenario(tmp_path / "s.yaml").data == load_scenario(tmp_path / "s.json").data
    (tmp_path / "bad.yaml").write_text("- just a list", encoding="utf-8")
    with pytest.raises(ScenarioError):
        load_scenario(tmp_path / "bad.yaml")
    assert main(["--validate", str(tmp_path / "s.yaml")]) == 0
    assert main(["--validate", str(tmp_path / "bad.yaml")]) == 2


def test_journal_file_in_process(tmp_path):
    path = tmp_path / "journal.jsonl"
    with running_sim(journal_path=path) as sim:
        d = u2.connect("sim-1")
        xml = walk_to_confirm(d, GOODS, ["黑色CHA(纯棉)", "M(建议100-115)"])
        d.adb_device.shell("input tap {} {}".format(*center(submit_node(xml).getparent())))
        assert sim.phone().journal.order_counts() == {GOODS: 1}
    entries = read_journal(path)
    assert_order_counts(entries, {GOODS: 1})
    assert {e["kind"] for e in entries} >= {"tap", "deep_link", "dump", "order", "shell", "rpc"}


def test_subprocess_cli_journal_and_remote_queries(tmp_path):
    path = tmp_path / "j.jsonl"
    with running_sim_process(serials=("sim-1", "sim-2"), journal_path=path) as proc:
        with adb_env(proc.port):
            d = u2.connect("sim-2")
            xml = walk_to_confirm(d, GOODS, ["黑色CHA(纯棉)", "M(建议100-115)"])
            proc.inject("sim-2", {"kind": "popup", "popup": "coupon", "when": {"after_taps": 99}})
            d.adb_device.shell("input tap {} {}".format(*center(submit_node(xml).getparent())))
        remote = proc.journal("sim-2")
        assert_order_counts(remote, {GOODS: 1})
        assert proc.journal("sim-1") == []
        assert proc.state("sim-2")["screen"] == "order"
        assert proc.state("sim-2")["counters"]["taps"] == 5
    assert proc.stop() is None  # already stopped by the context manager
    assert_order_counts(read_journal(path), {GOODS: 1})


def test_cli_prints_serials_and_stops_on_sigterm():
    p = subprocess.Popen(
        [sys.executable, "-m", "cmbuyer.phonesim.cli", "--port", "0", "--serial", "a-1", "--serial", "b-2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [p.stdout.readline().strip() for _ in range(4)]
        assert lines[0].startswith("listening 127.0.0.1:")
        assert lines[1:] == ["serial a-1 device", "serial b-2 device", "ready"]
        p.terminate()
        assert p.wait(timeout=10) == 0
        assert p.stdout.read().strip() == "stopped"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


def test_cli_bad_scenario_exits_2(tmp_path):
    (tmp_path / "x.json").write_text("{}", encoding="utf-8")
    r = subprocess.run(
        [sys.executable, "-m", "cmbuyer.phonesim.cli", "--port", "0", "--scenario", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "catalogue" in r.stderr


def test_png_render_is_visible():
    from cmbuyer.phonesim import PhoneSim

    with PhoneSim() as sim:
        phone = sim.phone()
        phone.deep_link(f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={GOODS}")
        import io

        from PIL import Image

        img = Image.open(io.BytesIO(phone.screenshot("png")))
        assert img.size == (1080, 2400) and img.mode == "RGB"
        # the red buy buttons at the bottom right are drawn
        r, g, b = img.getpixel((1000, 2130))
        assert r > 200 and g < 80 and b < 80

"""The operator pack directory (agent/pack/resolve.py): precedence, trust (permissions),
ambiguity, one-line errors for every kind of bad pack, and the per-file cache. Real files in a temp
dir, the real shipped packs and their evidence; ``doctor`` and ``inspect`` through the real CLI (doctor
against the phone simulator through the real uiautomator2/adbutils)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.cli import main
from cmbuyer.agent.errors import PackError
from cmbuyer.agent.pack.resolve import all_packs, resolve, resolve_pack, scan
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from tests.agent.packtools import evidence_path, flip_byte, make_pack_dir, rebound, write_pack


@pytest.fixture
def pack_dir(tmp_path: Path) -> Path:
    return make_pack_dir(tmp_path / "packs")


def _error(version: tuple[str, int], pack_dir: Path | None, *, check_permissions: bool = True) -> str:
    with pytest.raises(PackError) as info:
        resolve(*version, pack_dir, check_permissions=check_permissions)
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# --- precedence ----------------------------------------------------------------------------------
def test_no_pack_dir_uses_the_shipped_pack() -> None:
    found = resolve("8.22.0", 82200, None, check_permissions=True)
    assert (found.pack.id, found.origin, found.overrides) == ("pdd-8.22.0-82200", "shipped", None)


def test_operator_pack_for_a_new_version_is_used(pack_dir: Path) -> None:
    path = write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300))
    found = resolve("8.23.0", 82300, pack_dir, check_permissions=True)
    assert (found.pack.id, found.origin, found.path, found.overrides) == ("ops-8.23.0-82300", "operator", path, None)
    assert _error(("8.24.0", 82400), pack_dir) == "没有适用于应用版本 8.24.0（82400）的识别包"


def test_operator_pack_wins_over_the_shipped_pack_of_the_same_version(pack_dir: Path) -> None:
    path = write_pack(pack_dir, rebound("8.22.0", "8.22.0", 82200, "site-8.22.0"))
    found = resolve("8.22.0", 82200, pack_dir, check_permissions=True)
    assert (found.pack.id, found.origin) == ("site-8.22.0", "operator")
    assert found.overrides is not None and found.overrides.pack is not None
    assert found.overrides.pack.id == "pdd-8.22.0-82200"
    assert found.describe() == f"site-8.22.0（运维识别包 {path}），取代随附识别包 pdd-8.22.0-82200"
    # other versions keep their shipped pack
    assert resolve_pack("8.17.0", 81700, pack_dir, check_permissions=True).id == "pdd-8.17.0-81700"


def test_operator_pack_may_keep_the_shipped_id_of_its_own_version_only(pack_dir: Path) -> None:
    """A cmbuyer upgrade that ships a pack under the id an operator already used for the same version
    changes nothing; the same id for another version is refused (the heartbeat reports the id)."""
    write_pack(pack_dir, rebound("8.22.0", "8.22.0", 82200, "pdd-8.22.0-82200"), "mine-822.json")
    found = resolve("8.22.0", 82200, pack_dir, check_permissions=True)
    assert (found.pack.id, found.origin) == ("pdd-8.22.0-82200", "operator")
    write_pack(pack_dir, rebound("8.22.0", "8.30.0", 83000, "pdd-8.17.0-81700"))
    assert _error(("8.30.0", 83000), pack_dir) == (
        "pdd-8.17.0-81700.json: $.id: 'pdd-8.17.0-81700' 是拼多多 8.17.0 (81700) 的随附识别包的 id"
    )


def test_two_operator_packs_for_one_version_are_refused_naming_both(pack_dir: Path) -> None:
    write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300, "a-823"), "a.json")
    write_pack(pack_dir, rebound("8.17.0", "8.23.0", 82300, "b-823"), "b.json")
    assert _error(("8.23.0", 82300), pack_dir) == (
        "应用版本 8.23.0（82300）有两个运维识别包：a.json、b.json（只保留一个）"
    )
    # also when the second one is the same version as a shipped pack: no fallback to the shipped one
    write_pack(pack_dir, rebound("8.22.0", "8.22.0", 82200, "c-822"), "c.json")
    write_pack(pack_dir, rebound("8.22.0", "8.22.0", 82200, "d-822"), "d.json")
    assert "c.json、d.json" in _error(("8.22.0", 82200), pack_dir)


def test_duplicate_pack_id_across_files_refuses_both(pack_dir: Path) -> None:
    write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300, "same"), "one.json")
    write_pack(pack_dir, rebound("8.22.0", "8.24.0", 82400, "same"), "two.json")
    assert _error(("8.23.0", 82300), pack_dir) == "one.json: $.id: duplicate pack id 'same' (also in two.json)"
    assert _error(("8.24.0", 82400), pack_dir) == "two.json: $.id: duplicate pack id 'same' (also in one.json)"


# --- trust: permissions, owner, symlinks ---------------------------------------------------------
def test_group_writable_pack_file_is_refused_for_its_version_only(pack_dir: Path) -> None:
    path = write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300))
    write_pack(pack_dir, rebound("8.22.0", "8.24.0", 82400))
    path.chmod(0o664)
    assert _error(("8.23.0", 82300), pack_dir) == (
        "ops-8.23.0-82300.json: $: the pack file is group- or world-writable (mode 0664); run chmod go-w"
    )
    assert resolve_pack("8.24.0", 82400, pack_dir, check_permissions=True).id == "ops-8.24.0-82400"
    # inspect reads files without the trust check
    assert resolve_pack("8.23.0", 82300, pack_dir, check_permissions=False).id == "ops-8.23.0-82300"


def test_world_writable_pack_dir_refuses_every_version(pack_dir: Path) -> None:
    """Fail closed: the operator meant the dir's packs to override, so no fallback to shipped packs."""
    write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300))
    pack_dir.chmod(0o777)
    for version in (("8.23.0", 82300), ("8.17.0", 81700)):
        assert _error(version, pack_dir) == (
            f"operator pack dir {pack_dir}: the pack dir is group- or world-writable (mode 0777); run chmod go-w"
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_pack_file_and_dir_of_another_owner_are_refused(pack_dir: Path) -> None:
    path = write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300))
    os.chown(path, 65534, 65534)  # nobody
    assert _error(("8.23.0", 82300), pack_dir) == (
        "ops-8.23.0-82300.json: $: the pack file is owned by uid 65534, not by the agent's uid 0"
    )
    os.chown(path, 0, 0)
    os.chown(pack_dir, 65534, 65534)
    assert "the pack dir is owned by uid 65534" in _error(("8.23.0", 82300), pack_dir)


def test_symlinked_pack_file_is_refused(pack_dir: Path, tmp_path: Path) -> None:
    elsewhere = write_pack(make_pack_dir(tmp_path / "elsewhere"), rebound("8.22.0", "8.23.0", 82300))
    (pack_dir / "ops-8.23.0-82300.json").symlink_to(elsewhere)
    assert _error(("8.23.0", 82300), pack_dir) == (
        "ops-8.23.0-82300.json: $: the pack file is a symlink (put the file itself in the pack dir)"
    )


def test_missing_pack_dir_is_refused(tmp_path: Path) -> None:
    assert _error(("8.22.0", 82200), tmp_path / "nope") == (
        f"operator pack dir {tmp_path / 'nope'}: cannot read the pack dir (No such file or directory)"
    )


# --- bad packs: one line each, naming the file and the JSON path ---------------------------------
def _set_options_screen(d: dict[str, Any]) -> None:
    d["layouts"][0]["options_screen"] = "foo"


def _unknown_layout(d: dict[str, Any]) -> None:
    d["layouts"][0]["id"] = "carousel"


def _bad_evidence_path(d: dict[str, Any]) -> None:
    d["evidence"]["sim-product"]["files"]["dump"]["path"] = "../../etc/passwd"


def _absolute_evidence_path(d: dict[str, Any]) -> None:
    d["evidence"]["sim-product"]["files"]["dump"]["path"] = "/etc/passwd"


def _bad_regex(d: dict[str, Any]) -> None:
    d["buy_paths"]["single"]["text"] = "单独购买("


def _tap_on_payment(d: dict[str, Any]) -> None:
    d["buy_paths"]["single"]["text"] = "去支付|单独购买"


def _unknown_evidence_in_a_screen_rule(d: dict[str, Any]) -> None:
    d["screens"]["product"]["all"][-1]["evidence"].append("v823-01-produkt")


def _bad_regex_in_a_screen_rule(d: dict[str, Any]) -> None:
    d["screens"]["product"]["all"][-1]["text"] = "单独购买("


def _bad_regex_in_a_group_terminator(d: dict[str, Any]) -> None:
    d["readers"]["sku_panel"]["group_terminators"][0]["text"] = "数量("


BAD = [
    (_set_options_screen, "$.layouts[0].options_screen: 'foo' is not one of ['sku_panel', 'confirm_order']"),
    (_unknown_layout, "$.layouts[0].id: 'carousel' is not one of ['sku_sheet', 'order_sheet']"),
    (lambda d: d.pop("payment"), "$: 'payment' is a required property"),
    (lambda d: d["app"].update(version_code="81700"), "$.app.version_code: '81700' is not of type 'integer'"),
    (_bad_evidence_path, "$.evidence['sim-product'].files.dump.path: '../../etc/passwd' does not match"),
    (_absolute_evidence_path, "$.evidence['sim-product'].files.dump.path: '/etc/passwd' does not match"),
    (_bad_regex, "$.buy_paths.single.text: bad regex (missing ), unterminated subpattern at position 4)"),
    (_tap_on_payment, "$.buy_paths.single: a tap selector could match a payment or submit control"),
    # members of selector lists are named by their index (they were named as the list itself)
    (_unknown_evidence_in_a_screen_rule, "$.screens.product.all[0].evidence: unknown evidence id 'v823-01-produkt'"),
    (_bad_regex_in_a_screen_rule, "$.screens.product.all[0].text: bad regex"),
    (_bad_regex_in_a_group_terminator, "$.readers.sku_panel.group_terminators[0].text: bad regex"),
]


@pytest.mark.parametrize("mutate,expected", BAD)
def test_bad_pack_is_one_line_naming_file_and_json_path(pack_dir: Path, mutate: Any, expected: str) -> None:
    data = rebound("8.17.0", "8.23.0", 82300)
    mutate(data)
    write_pack(pack_dir, data, "pdd-8.23.0-82300.json")
    text = _error(("8.23.0", 82300), pack_dir)
    assert text.startswith(f"pdd-8.23.0-82300.json: {expected}"), text


def test_invalid_json_is_one_line_attributed_by_file_name(pack_dir: Path) -> None:
    path = pack_dir / "pdd-8.23.0-82300.json"
    path.write_text('{"pack_format": 2,\n "id": "x",,}', encoding="utf-8")
    path.chmod(0o644)
    text = _error(("8.23.0", 82300), pack_dir)
    # where a hand edit broke it (the strict decoder alone said only "not strict JSON")
    assert text == (
        "pdd-8.23.0-82300.json: $: not valid strict JSON (Expecting property name enclosed in double "
        "quotes at line 2 column 12)"
    ), text
    path.write_text('{"pack_format": 2, "pack_format": 2}', encoding="utf-8")  # JSON, but not strict
    assert _error(("8.23.0", 82300), pack_dir).startswith("pdd-8.23.0-82300.json: $: not valid strict JSON (duplicate")


def test_evidence_missing_or_changed_is_one_line(pack_dir: Path) -> None:
    data = rebound("8.22.0", "8.23.0", 82300)
    write_pack(pack_dir, data)
    target = evidence_path(pack_dir, data, "sim822-sheet-mug", "screenshot")
    flip_byte(target)
    text = _error(("8.23.0", 82300), pack_dir)
    assert text.startswith(
        "ops-8.23.0-82300.json: $.evidence['sim822-sheet-mug'].files.screenshot: evidence mismatch: "
        "evidence/pdd-8.22.0-82200/sim822-sheet-mug/screenshot.png (sha256 "
    ), text
    target.unlink()
    assert _error(("8.23.0", 82300), pack_dir) == (
        "ops-8.23.0-82300.json: $.evidence['sim822-sheet-mug'].files.screenshot: evidence missing: "
        "evidence/pdd-8.22.0-82200/sim822-sheet-mug/screenshot.png (no such file)"
    )


def test_evidence_symlink_leaving_the_pack_dir_is_refused(pack_dir: Path, tmp_path: Path) -> None:
    data = rebound("8.22.0", "8.23.0", 82300)
    write_pack(pack_dir, data)
    target = evidence_path(pack_dir, data, "sim822-product", "meta")
    outside = tmp_path / "outside-meta.json"
    outside.write_bytes(target.read_bytes())  # same bytes, same hash: still refused
    target.unlink()
    target.symlink_to(outside)
    assert "$.evidence['sim822-product'].files.meta: evidence unsafe: " in _error(("8.23.0", 82300), pack_dir)


# --- a broken operator pack does not take the others down ----------------------------------------
def test_broken_pack_affects_only_its_version_and_is_logged_once(
    pack_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300))
    broken = rebound("8.22.0", "8.24.0", 82400)
    broken["layouts"][0]["id"] = "carousel"
    write_pack(pack_dir, broken)
    (pack_dir / "notes.json").write_text("not json", encoding="utf-8")
    (pack_dir / "notes.json").chmod(0o644)
    caplog.set_level(logging.WARNING, logger="cmbuyer.agent.pack.resolve")
    for _ in range(3):
        assert resolve_pack("8.23.0", 82300, pack_dir, check_permissions=True).id == "ops-8.23.0-82300"
        assert resolve_pack("8.22.0", 82200, pack_dir, check_permissions=True).id == "pdd-8.22.0-82200"
        assert _error(("8.24.0", 82400), pack_dir).startswith("ops-8.24.0-82400.json: $.layouts[0].id: 'carousel'")
    assert _error(("8.25.0", 82500), pack_dir) == (
        "没有适用于应用版本 8.25.0（82500）的识别包；无法读取的运维识别包文件：notes.json"
    )
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # once per broken file, however many lookups
    assert {w.split(":")[0] for w in warnings} == {"selector pack refused"}
    # inspect's list: one pack per usable version, the broken version left out
    assert [p.id for p in all_packs(pack_dir)] == ["pdd-8.17.0-81700", "pdd-8.22.0-82200", "ops-8.23.0-82300"]


def test_the_error_a_lookup_raises_is_not_also_logged(pack_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The caller of resolve() reports the error of its own version (run: ``NO_PACK: …``, dry-run: the
    error JSON); the resolver's warning is only for broken files of OTHER versions — one error, one line
    in the agent's log (it was said twice, once as a bare ``WARNING:cmbuyer.agent.pack.resolve:`` line)."""
    data = rebound("8.22.0", "8.23.0", 82300)
    write_pack(pack_dir, data)
    flip_byte(evidence_path(pack_dir, data, "sim822-product", "dump"))
    caplog.set_level(logging.WARNING, logger="cmbuyer.agent.pack.resolve")
    for _ in range(3):
        assert "evidence mismatch" in _error(("8.23.0", 82300), pack_dir)
    assert caplog.records == []
    resolve_pack("8.22.0", 82200, pack_dir, check_permissions=True)  # another version: logged, once
    resolve_pack("8.22.0", 82200, pack_dir, check_permissions=True)
    assert [r.getMessage().split(": ")[:2] for r in caplog.records] == [
        ["selector pack refused", "ops-8.23.0-82300.json"]
    ]
    caplog.clear()
    pack_dir.chmod(0o777)  # a refused directory: raised to the caller, not logged besides
    assert "world-writable" in _error(("8.22.0", 82200), pack_dir)
    assert caplog.records == []


@pytest.mark.serial  # times 100 lookups against a bound
def test_fix_and_breakage_take_effect_without_restart_and_lookups_stay_cheap(pack_dir: Path) -> None:
    """The runner looks the pack up every loop: cached per file by stat, re-hashed when a file changes."""
    data = rebound("8.22.0", "8.23.0", 82300)
    write_pack(pack_dir, data)
    assert resolve_pack("8.23.0", 82300, pack_dir, check_permissions=True).id == "ops-8.23.0-82300"
    started = time.perf_counter()
    for _ in range(100):
        resolve_pack("8.23.0", 82300, pack_dir, check_permissions=True)
    per_lookup = (time.perf_counter() - started) / 100
    assert per_lookup < 0.02, per_lookup  # an uncached load re-hashes ~6 MB of evidence (~0.1 s)
    dump = evidence_path(pack_dir, data, "sim822-product", "dump")
    good = dump.read_bytes()
    flip_byte(dump, 10)
    assert "evidence mismatch" in _error(("8.23.0", 82300), pack_dir)
    dump.write_bytes(good)
    assert resolve_pack("8.23.0", 82300, pack_dir, check_permissions=True).id == "ops-8.23.0-82300"


# --- CLI: inspect and doctor ---------------------------------------------------------------------
def test_inspect_reads_with_the_operator_pack_and_prints_a_bad_pack_as_one_line(
    pack_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = Path(__file__).parents[1] / "fixtures" / "sim822" / "sheet_tshirt.xml"
    write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300))
    assert main(["inspect", "--dump", str(dump), "--version", "8.23.0:82300", "--pack-dir", str(pack_dir)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["pack"], out["screen"], out["readings"]["confirm_amount"]) == (
        "ops-8.23.0-82300",
        "confirm_order",
        "29.90",
    )
    bad = rebound("8.22.0", "8.24.0", 82400)
    _set_options_screen(bad)
    write_pack(pack_dir, bad)
    assert main(["inspect", "--dump", str(dump), "--version", "8.24.0:82400", "--pack-dir", str(pack_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.count("\n") == 1
    assert json.loads(captured.out) == {
        "error": "NO_SELECTOR_PACK",
        "detail": "ops-8.24.0-82400.json: $.layouts[0].options_screen: 'foo' is not one of "
        "['sku_panel', 'confirm_order']",
    }


def _doctor(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, dict[str, Any]]]:
    code = main(["doctor", "--json", "--device", "sim-1", "--server", "http://127.0.0.1:9", *argv])
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    return code, checks


def test_doctor_says_which_pack_is_in_use_and_reports_broken_packs(
    pack_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against the simulator on 8.22.0 through the real uiautomator2/adbutils (the server part fails:
    no server is listening — only the pack checks are asserted)."""
    monkeypatch.delenv("CMBUYER_DEVICE_ID", raising=False)
    path = write_pack(pack_dir, rebound("8.22.0", "8.22.0", 82200, "site-8.22.0"))
    with adbutils_leaks_ignored(), running_sim("order_sheet", serials=["sim-1"]):
        _, checks = _doctor([], capsys)
        shipped = checks["selector pack"]
        assert shipped["ok"] is True and shipped["detail"].startswith("pdd-8.22.0-82200（随附识别包 /")
        assert shipped["detail"].endswith("/pdd-8.22.0-82200.json）")
        assert checks["selector packs load"]["ok"] is True
        _, checks = _doctor(["--pack-dir", str(pack_dir)], capsys)
        assert checks["selector pack"] == {
            "check": "selector pack",
            "ok": True,
            "detail": f"site-8.22.0（运维识别包 {path}），取代随附识别包 pdd-8.22.0-82200",
        }
        bad = rebound("8.22.0", "8.40.0", 84000)
        _unknown_layout(bad)
        write_pack(pack_dir, bad)
        monkeypatch.setenv("CMBUYER_AGENT_PACK_DIR", str(pack_dir))
        code, checks = _doctor([], capsys)
        assert code == 1 and checks["selector pack"]["ok"] is True  # the phone's version is unaffected
        assert checks["selector packs load"] == {
            "check": "selector packs load",
            "ok": False,
            "detail": "ops-8.40.0-84000.json: $.layouts[0].id: 'carousel' is not one of ['sku_sheet', 'order_sheet']",
        }
        pack_dir.chmod(0o775)
        _, checks = _doctor([], capsys)
        assert checks["selector pack"]["ok"] is False
        assert checks["selector pack"]["detail"] == (
            f"operator pack dir {pack_dir}: the pack dir is group- or world-writable (mode 0775); run chmod go-w"
        )


def test_scan_lists_operator_and_shipped_files(pack_dir: Path) -> None:
    write_pack(pack_dir, rebound("8.22.0", "8.23.0", 82300))
    found = scan(pack_dir, check_permissions=True)
    path = pack_dir / "ops-8.23.0-82300.json"
    assert [f.describe() for f in found.operator] == [f"ops-8.23.0-82300（运维 {path}）"]
    assert [f.pack.id for f in found.shipped if f.pack] == ["pdd-8.17.0-81700", "pdd-8.22.0-82200"]
    assert found.broken() == [] and found.dir_error is None


def test_a_broken_pack_is_not_reloaded_every_loop(pack_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner resolves every second: a pack whose evidence does not hash (or that does not parse)
    is loaded once per change of its files, not re-parsed and re-hashed on each lookup (CPU spin)."""
    import cmbuyer.agent.pack.resolve as packdir

    loads: list[Path] = []
    real = packdir.load_pack_file

    def counting(path: Path, **kw: Any) -> Any:
        loads.append(path)
        return real(path, **kw)

    monkeypatch.setattr(packdir, "load_pack_file", counting)
    data = rebound("8.22.0", "8.23.0", 82300)
    path = write_pack(pack_dir, data)
    dump = evidence_path(pack_dir, data, "sim822-product", "dump")
    good = dump.read_bytes()
    flip_byte(dump, 10)
    for _ in range(20):
        assert "evidence mismatch" in _error(("8.23.0", 82300), pack_dir)
    assert loads.count(path) == 1, loads.count(path)
    dump.write_bytes(good)  # the fix: an evidence file changes, the pack file does not
    assert resolve_pack("8.23.0", 82300, pack_dir, check_permissions=True).id == "ops-8.23.0-82300"
    path.write_text("{", "utf-8")  # a pack that does not parse at all
    for _ in range(20):
        assert "not valid strict JSON" in _error(("8.23.0", 82300), pack_dir)
    assert loads.count(path) == 3, loads.count(path)


# --- bounded before parsing ----------------------------------------------------------
NESTED = {
    "100,000-deep arrays": "[" * 100_000 + "]" * 100_000,
    "100,000-deep objects": '{"a":' * 100_000 + "0" + "}" * 100_000,
    "40-deep": '{"pack_format": ' + "[" * 40 + "]" * 40 + "}",
    "60,000 values": "[" + ",".join(["0"] * 60_000) + "]",
    "unbalanced 100,000 openers": "[" * 100_000,
}


@pytest.mark.parametrize("text", NESTED.values(), ids=NESTED.keys())
def test_a_too_deep_or_too_big_pack_is_one_line_naming_the_file(
    pack_dir: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = pack_dir / "pdd-8.23.0-82300.json"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)
    error = _error(("8.23.0", 82300), pack_dir)
    assert error in (
        "pdd-8.23.0-82300.json: $: nested deeper than 32 levels",
        "pdd-8.23.0-82300.json: $: more than 50000 values",
    )
    # every other duty of the scan goes on: the shipped packs still serve their versions
    assert resolve("8.22.0", 82200, pack_dir, check_permissions=True).pack.id == "pdd-8.22.0-82200"
    assert [f.error for f in scan(pack_dir, check_permissions=True).operator] == [error]
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


def test_strings_may_hold_brackets_and_commas() -> None:
    """Only structure counts: a string full of brackets and commas is one value at depth 0."""
    from cmbuyer.schemas.strictjson import shape_problem

    text = json.dumps({"note": "[{" * 1000 + ',"\\"' * 1000})
    assert shape_problem(text, max_depth=2, max_values=3) is None
    assert shape_problem("[[[]]]", max_depth=2, max_values=10) == "nested deeper than 2 levels"
    assert shape_problem("[0,0,0]", max_depth=2, max_values=3) == "more than 3 values"


def test_inspect_and_doctor_refuse_a_100000_deep_pack_in_one_line(
    pack_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CMBUYER_DEVICE_ID", raising=False)
    path = pack_dir / "pdd-8.24.0-82400.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    path.chmod(0o644)
    dump = Path(__file__).parents[1] / "fixtures" / "sim822" / "sheet_tshirt.xml"
    assert main(["inspect", "--dump", str(dump), "--version", "8.24.0:82400", "--pack-dir", str(pack_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.count("\n") == 1
    assert json.loads(captured.out) == {
        "error": "NO_SELECTOR_PACK",
        "detail": "pdd-8.24.0-82400.json: $: more than 50000 values",
    }
    # doctor (no phone needed for this check): the pack-dir scan names the file in one line
    code, checks = _doctor(["--pack-dir", str(pack_dir)], capsys)
    assert code == 1
    assert checks["selector packs load"]["detail"] == "pdd-8.24.0-82400.json: $: more than 50000 values"

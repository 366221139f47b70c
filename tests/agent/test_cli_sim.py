"""`cmbuyer-agent doctor` / `capture` / `journal` smoke tests against the phone simulator's real adb
server (real uiautomator2 + adbutils) and, for doctor's server checks, the real server."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.cli import main
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim

from .realserver import RealServer
from .test_flow_sim import _default


def _creds_file(tmp: Path, srv: RealServer) -> Path:
    creds = srv.add_device()
    path = tmp / "cred"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"device_id": creds.device_id, "token": creds.token}, fh)
    return path


def _checks(out: str) -> dict[str, Any]:
    report = json.loads(out)
    return {c["check"]: c for c in report["checks"]}


def test_doctor_all_green(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim():
        cred = _creds_file(tmp_path, srv)
        rc = main(["doctor", "--json", "--device", "sim-1", "--server", srv.url, "--credentials-file", str(cred)])
        out = capsys.readouterr().out
        checks = _checks(out)
        row = srv.device_row(json.loads(cred.read_text())["device_id"])
    assert (row["reported_state"], row["pack_id"]) == ("PAUSED", "pdd-8.17.0-81700")  # heartbeat pack_id
    assert json.loads(cred.read_text())["token"] not in out
    assert rc == 0, checks
    # which pack and where from (operator pack dirs: tests/agent/pack/test_resolve.py)
    assert checks["selector pack"]["detail"].startswith("pdd-8.17.0-81700（随附识别包 /")
    assert checks["Pinduoduo installed"]["detail"] == "8.17.0 (81700)"
    assert checks["server allows this app version"]["ok"]
    assert all(c["ok"] for c in checks.values())


def test_doctor_prints_chinese_lines_without_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--json`` doctor prints one Chinese line per check (its ``--json`` name beside the
    label); a failed check says 失败 and its detail."""
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim():
        cred = _creds_file(tmp_path, srv)
        rc = main(["doctor", "--device", "sim-1", "--server", srv.url, "--credentials-file", str(cred)])
        lines = capsys.readouterr().out.splitlines()
        bad = main(["doctor", "--device", "sim-1", "--server", srv.url, "--credentials-file", str(tmp_path / "none")])
        failed = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0] == "cmbuyer-agent doctor：手机 sim-1"
    assert "通过 已安装拼多多 (Pinduoduo installed)：8.17.0 (81700)" in lines
    assert any(line.startswith("通过 识别包 (selector pack)：pdd-8.17.0-81700") for line in lines), lines
    assert any(line.startswith("通过 服务器接受这台设备 (server accepts the device)：http://") for line in lines)
    assert len(lines) == 10 and all(line.startswith("通过 ") for line in lines[1:]), lines
    assert bad == 1 and any(line.startswith("失败 设备凭据 (device credentials)：无法读取凭据文件") for line in failed)


def test_doctor_reports_missing_pack_and_bad_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scen = copy.deepcopy(_default())
    scen["app"]["version_name"], scen["app"]["version_code"] = "8.18.0", 81800
    bad = tmp_path / "bad"
    fd = os.open(bad, os.O_WRONLY | os.O_CREAT, 0o644)  # world-readable: refused
    os.close(fd)
    with adbutils_leaks_ignored(), running_sim(scen):
        rc = main(
            ["doctor", "--json", "--device", "sim-1", "--server", "http://127.0.0.1:9", "--credentials-file", str(bad)]
        )
        checks = _checks(capsys.readouterr().out)
    assert rc == 1
    assert checks["selector pack"]["ok"] is False
    assert checks["device credentials"]["ok"] is False and "0600" in checks["device credentials"]["detail"]


def test_doctor_heartbeats_no_pack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No pack for the installed version: doctor fails the pack check and tells the server NO_PACK."""
    scen = copy.deepcopy(_default())
    scen["app"]["version_name"], scen["app"]["version_code"] = "8.18.0", 81800
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim(scen):
        cred = _creds_file(tmp_path, srv)
        rc = main(["doctor", "--json", "--device", "sim-1", "--server", srv.url, "--credentials-file", str(cred)])
        checks = _checks(capsys.readouterr().out)
        row = srv.device_row(json.loads(cred.read_text())["device_id"])
    assert rc == 1 and checks["selector pack"]["ok"] is False and checks["server accepts the device"]["ok"]
    assert (row["pdd_version"], row["pack_id"]) == ("8.18.0", "NO_PACK")


def test_doctor_and_run_find_credentials_alike_and_say_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No credentials → doctor names the options and the default path; credentials in the default
    path (``$CMBUYER_AGENT_STATE_DIR/<serial>.cred``) are found without flags; a revoked device → doctor says
    401 and what to check, and ``run --once`` ends with that one line and exit code 2."""
    from cmbuyer.agent.cli import default_credentials_path

    monkeypatch.setenv("CMBUYER_AGENT_STATE_DIR", str(tmp_path / "state"))
    for name in ("CMBUYER_DEVICE_ID", "CMBUYER_DEVICE_TOKEN", "CMBUYER_SERVER_URL"):
        monkeypatch.delenv(name, raising=False)
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim():
        assert main(["doctor", "--json", "--device", "sim-1", "--server", srv.url]) == 1
        missing = _checks(capsys.readouterr().out)["device credentials"]
        default = default_credentials_path("sim-1", tmp_path / "state")
        assert missing["ok"] is False
        for named in ("--credentials-file", "CMBUYER_DEVICE_ID", "CMBUYER_DEVICE_TOKEN", str(default)):
            assert named in missing["detail"]
        monkeypatch.setenv("CMBUYER_DEVICE_ID", "0b5f6c1e-3a9d-4c1b-8e2f-7d6a5b4c3d2e")
        assert main(["doctor", "--json", "--device", "sim-1", "--server", srv.url]) == 1
        half = _checks(capsys.readouterr().out)["device credentials"]["detail"]
        assert half.startswith("CMBUYER_DEVICE_TOKEN 未设置")
        monkeypatch.delenv("CMBUYER_DEVICE_ID")

        default.parent.mkdir(parents=True)
        creds = srv.add_device()
        fd = os.open(default, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"device_id={creds.device_id}\ntoken={creds.token}\n")
        assert main(["doctor", "--json", "--device", "sim-1", "--server", srv.url]) == 0, capsys.readouterr().out
        capsys.readouterr()

        srv.revoke_device(creds.device_id)
        assert main(["doctor", "--json", "--device", "sim-1", "--server", srv.url]) == 1
        out = capsys.readouterr().out
        refused = _checks(out)["server accepts the device"]["detail"]
        assert refused == "服务器拒绝了设备凭据（401）：请检查 --credentials-file，或这台设备已被撤销"
        assert main(["run", "--device", "sim-1", "--server", srv.url, "--once"]) == 2
        err = capsys.readouterr().err
        assert [line for line in err.splitlines() if "401" in line] == err.splitlines()[-1:]
        assert creds.token not in out + err


def test_doctor_without_adb_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    monkeypatch.delenv("CMBUYER_DEVICE_ID", raising=False)
    rc = main(["doctor", "--json", "--device", "sim-1", "--server", "http://127.0.0.1:9"])
    checks = _checks(capsys.readouterr().out)
    assert rc == 1 and "无法连接 adb 服务 127.0.0.1:" in checks["phone"]["detail"]


def test_doctor_and_dry_run_say_in_chinese_that_a_phone_is_not_online(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A serial adb does not list (sim-9) is named in Chinese by doctor and dry-run alike."""
    with adbutils_leaks_ignored(), running_sim():
        rc = main(["doctor", "--json", "--device", "sim-9", "--server", "http://127.0.0.1:9"])
        phone = _checks(capsys.readouterr().out)["phone"]
        dry_run = ["dry-run", "--device", "sim-9", "--goods-id", "1", "--color", "黑", "--quantity", "1"]
        dry = main([*dry_run, "--max-total", "9.00", "--out", str(tmp_path / "out")])
        printed = json.loads(capsys.readouterr().out)
    assert rc == 1 and phone["detail"].startswith("手机 sim-9 不在线（")
    assert dry == 2 and printed == {"error": "ADB_ERROR", "detail": phone["detail"]}


def test_capture_writes_an_evidence_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "bundle"
    with adbutils_leaks_ignored(), running_sim() as sim:
        sim.phone("sim-1").app.open_url("pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id=937122477375")
        rc = main(["capture", "--device", "sim-1", "--label", "product page", "--out", str(out_dir)])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0
    xml = (out_dir / "dump.xml").read_bytes()
    png = (out_dir / "screenshot.png").read_bytes()
    meta = json.loads((out_dir / "meta.json").read_text("utf-8"))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert meta["dump_sha256"] == hashlib.sha256(xml).hexdigest() == printed["dump_sha256"]
    assert meta["screenshot_sha256"] == hashlib.sha256(png).hexdigest()
    assert (meta["app_version_name"], meta["app_version_code"]) == ("8.17.0", 81700)
    assert meta["label"] == "product page" and meta["device"] == "sim-1"
    # the bundle is what `inspect` reads when authoring a pack
    rc = main(["inspect", "--dump", str(out_dir / "dump.xml")])
    assert rc == 0 and json.loads(capsys.readouterr().out)["screen"] == "product"


def test_journal_command_shows_state_without_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cmbuyer.agent.journal import Journal

    from .fakes import journal_claim, make_purchase

    monkeypatch.setenv("CMBUYER_AGENT_STATE_DIR", str(tmp_path))
    j = Journal.for_serial("192.168.0.173:5555", tmp_path)
    c = make_purchase().claim
    journal_claim(j, c)
    j.set_hold("lease lost")
    assert main(["journal", "--device", "192.168.0.173:5555"]) == 0
    out = capsys.readouterr().out
    assert c.claim_token not in out and json.loads(out)["hold"] == "lease lost"
    assert main(["journal", "--device", "192.168.0.173:5555", "--clear-hold"]) == 0
    assert json.loads(capsys.readouterr().out)["hold"] is None


@pytest.mark.parametrize("json_logs", [False, True])
def test_progress_lines_show_hidden_characters_instead_of_obeying_them(
    json_logs: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reading from the phone in a progress line (``GATE_1 STOP … color=\\u202e色黑``) is shown
    with its bidi/invisible characters escaped, on one line."""
    from cmbuyer.agent.cli import _progress_fn

    _progress_fn(json_logs)("GATE_1 STOP SKU_MISMATCH — color=\u202e色黑\nsize=M\u200b")
    err = capsys.readouterr().err
    assert "\u202e" not in err and "\u200b" not in err and err.count("\n") == 1
    assert "\\u202e色黑" in (json.loads(err)["msg"] if json_logs else err)


def test_doctor_leaves_a_running_agents_state_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Doctor beside a running agent sends no heartbeat (its PAUSED would overwrite the agent's READY on the
    devices page) and says why; ``run`` holds the lock doctor looks at: a second ``run`` for the phone refuses
    to start with one line. Without a running agent doctor heartbeats as before (test_doctor_all_green)."""
    from cmbuyer.agent.cli import DOCTOR_AGENT_RUNNING
    from cmbuyer.agent.client import HttpDeviceApi
    from cmbuyer.agent.instance import run_lock
    from cmbuyer.agent.settings import load_agent_settings

    monkeypatch.setenv("CMBUYER_AGENT_STATE_DIR", str(tmp_path / "state"))
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim():
        cred = _creds_file(tmp_path, srv)
        device_id = json.loads(cred.read_text())["device_id"]
        with run_lock("sim-1", load_agent_settings().lock_dir):  # what `run` holds while it runs (the suite's dir)
            agent = HttpDeviceApi(srv.url, srv_creds(cred), _NoKeysForTest(), retries=0)
            agent.heartbeat(
                adb_serial="sim-1", android_release="16", pdd_version="8.17.0", pdd_version_code=81700, state="READY"
            )
            before = srv.device_row(device_id)
            rc = main(["doctor", "--json", "--device", "sim-1", "--server", srv.url, "--credentials-file", str(cred)])
            checks = _checks(capsys.readouterr().out)
            after = srv.device_row(device_id)
            assert main(["run", "--device", "sim-1", "--server", srv.url, "--credentials-file", str(cred)]) == 2
            refused = capsys.readouterr().err.strip().splitlines()
        rc_alone = main(["doctor", "--json", "--device", "sim-1", "--server", srv.url, "--credentials-file", str(cred)])
        capsys.readouterr()
        alone = srv.device_row(device_id)
    assert rc == 0, checks
    assert checks["server accepts the device"]["detail"] == f"{srv.url}；{DOCTOR_AGENT_RUNNING}"
    assert (after["reported_state"], after["last_heartbeat_at"]) == ("READY", before["last_heartbeat_at"])
    assert len(refused) == 1 and "已有一个 cmbuyer-agent run 在本机为手机 sim-1 运行" in refused[0]
    assert rc_alone == 0 and alone["reported_state"] == "PAUSED"


AGENT = str(Path(sys.executable).parent / "cmbuyer-agent")


def test_a_running_agent_is_seen_from_any_state_dir_and_doctor_still_checks_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run lock is per host and serial, not per state dir. A real ``run`` holds
    a phone (held: NEEDS_PERSON with SCREEN_UNRECOGNIZED); doctor started with another state dir sends no
    heartbeat — the server row keeps its state and hold — yet checks the token with the read-only call: the
    right one passes, a wrong one fails with 401 and exit 1. A second ``run`` with another state dir refuses."""
    from cmbuyer.agent.journal import Journal

    state = tmp_path / "agent-state"
    journal = Journal.for_serial("sim-1", state)
    journal.set_hold("SCREEN_UNRECOGNIZED: 画面无法识别")
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim():
        cred = _creds_file(tmp_path, srv)
        device_id = json.loads(cred.read_text())["device_id"]
        env = {**os.environ, "CMBUYER_AGENT_STATE_DIR": str(state)}
        command = ["--device", "sim-1", "--server", srv.url, "--credentials-file", str(cred)]
        with (tmp_path / "agent.log").open("wb") as log:
            proc = subprocess.Popen([AGENT, "run", *command], stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 60
            while srv.device_row(device_id).get("reported_state") != "NEEDS_PERSON":
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
                time.sleep(0.1)
            held = {k: v for k, v in srv.device_row(device_id).items() if k.startswith(("hold_", "reported_state"))}
            assert held["hold_code"] == "SCREEN_UNRECOGNIZED"
            monkeypatch.setenv("CMBUYER_AGENT_STATE_DIR", str(tmp_path / "other"))  # or another working folder
            rc = main(["doctor", "--json", *command])
            checks = _checks(capsys.readouterr().out)
            after = {k: v for k, v in srv.device_row(device_id).items() if k in held}
            wrong = tmp_path / "wrong.cred"
            fd = os.open(wrong, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"device_id": device_id, "token": "ab" * 32}, fh)
            rc_wrong = main(["doctor", "--json", *command[:-1], str(wrong)])
            wrong_checks = _checks(capsys.readouterr().out)
            rc_second = main(["run", "--once", *command])
            second = capsys.readouterr().err.strip().splitlines()
        finally:
            proc.terminate()
            proc.wait(30)
    assert after == held
    assert rc == 0 and checks["server accepts the device"]["ok"], checks
    assert rc_wrong == 1 and wrong_checks["server accepts the device"]["ok"] is False
    assert "（401）" in wrong_checks["server accepts the device"]["detail"]
    assert rc_second == 2 and len(second) == 1 and "已有一个 cmbuyer-agent run 在本机为手机 sim-1 运行" in second[0]


def test_run_lock_file_names_are_safe_and_distinct() -> None:
    """Every serial gets its own file inside the runtime dir: no ``/`` or ``..`` escapes, no two serials share."""
    from cmbuyer.agent.instance import lock_name

    serials = ["sim-1", "192.168.0.173:5555", "192.168.0.173_5555", "../x", "a/b", "..", "%2F", "x" * 300]
    names = [lock_name(s) for s in serials]
    assert len(set(names)) == len(names)
    assert all("/" not in n and n.endswith(".lock") and len(n) < 255 for n in names)
    assert lock_name("192.168.0.173:5555") == "192.168.0.173%3A5555.lock"


def srv_creds(path: Path) -> Any:
    from cmbuyer.agent.client import Credentials

    data = json.loads(path.read_text())
    return Credentials(data["device_id"], data["token"])


class _NoKeysForTest:
    """A heartbeat sends no idempotency key: no journal is needed to send one."""

    def key(self, purpose: str, scope: str = "") -> str:
        raise AssertionError("a heartbeat needs no key")

    def drop_key(self, purpose: str, scope: str = "") -> None:
        return None

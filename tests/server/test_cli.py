"""The `cmbuyer-server` CLI contract, run as real subprocesses on a real data dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from demo.stack import free_port

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
URL = "https://mobile.yangkeduo.com/goods.html?goods_id=937122477375"


def cli(
    data_dir: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmbuyer.server.cli", "--data-dir", str(data_dir), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**CLEAN_ENV, **(env or {})},
    )


def cli_json(data_dir: Path, *args: str, stdin: str | None = None) -> dict:
    result = cli(data_dir, *args, "--json", stdin=stdin)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def task_add(
    title: str = "t",
    *,
    url: str = URL,
    color: str = "a",
    size: str | None = "b",
    quantity: str = "1",
    price: str = "1.00",
) -> tuple[str, ...]:
    """The arguments of ``task add`` (``size=None`` leaves ``--size`` out: one-dimension goods)."""
    sized = ("--size", size) if size is not None else ()
    return (
        "task",
        "add",
        "--title",
        title,
        "--url",
        url,
        "--color",
        color,
        *sized,
        "--quantity",
        quantity,
        "--max-total-price",
        price,
    )


@pytest.fixture
def ddir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    out = cli_json(d, "init")
    assert out["env_file_created"] is True and len(out["migrations_applied"]) >= 2
    assert (d / "cmbuyer.env").stat().st_mode & 0o777 == 0o600
    return d


def test_init_tightens_an_existing_data_dir_and_prints_steps_that_run(tmp_path: Path) -> None:
    """``init`` on a data dir others can read makes it 0700 and the database 0600 (``doctor`` then
    passes its mode check), and its next steps run exactly as printed (in a shell, from another directory)."""
    import shlex

    d = tmp_path / "made by hand"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    result = cli(d, "init")
    assert result.returncode == 0, result.stderr
    assert d.stat().st_mode & 0o777 == 0o700 and (d / "cmbuyer.sqlite3").stat().st_mode & 0o777 == 0o600
    assert cli_json(d, "doctor")["ok"] is True
    steps = [line.split("#")[0].strip() for line in result.stdout.splitlines() if "--data-dir" in line]
    assert len(steps) == 3 and all(shlex.split(step)[2] == str(d) for step in steps)
    device_add = next(step for step in steps if " device add " in step)
    ran = subprocess.run(device_add, shell=True, capture_output=True, text=True, cwd="/", env=CLEAN_ENV, timeout=60)
    assert ran.returncode == 0 and "设备 id：" in ran.stdout, ran.stderr


def test_device_token_is_shown_once_and_only_its_hash_is_stored(ddir: Path) -> None:
    issued = cli_json(ddir, "device", "add", "--name", "phone-1")
    token, device_id = issued["token"], issued["device_id"]
    assert len(token) == 64 and token == token.lower()
    listing = cli(ddir, "device", "list", "--json")
    assert token not in listing.stdout and device_id in listing.stdout
    import hashlib

    digest = hashlib.sha256(bytes.fromhex(token)).digest()
    raw = b"".join(p.read_bytes() for p in ddir.iterdir() if p.is_file() and p.name.startswith("cmbuyer.sqlite3"))
    assert token.encode() not in raw and bytes.fromhex(token) not in raw
    import sqlite3

    conn = sqlite3.connect(ddir / "cmbuyer.sqlite3")
    assert conn.execute("SELECT token_hash FROM devices WHERE id = ?", (device_id,)).fetchone()[0] == digest
    audit_text = json.dumps(conn.execute("SELECT * FROM audit_log").fetchall())
    assert token not in audit_text and digest.hex() not in audit_text
    conn.close()


def test_revoke_is_idempotent_and_unknown_device_is_refused(ddir: Path) -> None:
    device_id = cli_json(ddir, "device", "add", "--name", "p")["device_id"]
    assert cli_json(ddir, "device", "revoke", device_id)["changed"] is True
    assert cli_json(ddir, "device", "revoke", device_id)["changed"] is False
    assert cli(ddir, "device", "revoke", "00000000-0000-4000-8000-000000000000").returncode == 1
    assert cli_json(ddir, "device", "list")["devices"][0]["state"] == "REVOKED"


def test_device_supervision_exemption_is_audited_and_idempotent(ddir: Path) -> None:
    device_id = cli_json(ddir, "device", "add", "--name", "p")["device_id"]
    assert cli_json(ddir, "device", "supervision", device_id, "off")["changed"] is True
    assert cli_json(ddir, "device", "supervision", device_id, "off")["changed"] is False
    assert cli_json(ddir, "device", "supervision", device_id, "on")["changed"] is True
    assert cli(ddir, "device", "supervision", "00000000-0000-4000-8000-000000000000", "off").returncode == 1
    assert cli(ddir, "device", "supervision", device_id, "maybe").returncode == 2
    import sqlite3

    conn = sqlite3.connect(ddir / "cmbuyer.sqlite3")
    assert conn.execute("SELECT supervision_off FROM devices WHERE id = ?", (device_id,)).fetchone()[0] == 0
    rows = conn.execute("SELECT detail_json FROM audit_log WHERE action = 'device.supervision' ORDER BY id").fetchall()
    conn.close()
    assert [json.loads(r[0])["supervision"] for r in rows] == ["off", "on"]  # an unchanged call writes nothing


def test_device_pause_resume_and_pace(ddir: Path) -> None:
    """``device pause|resume ID`` and ``device pace ID`` (audited; a revoked device is refused)."""
    device_id = cli_json(ddir, "device", "add", "--name", "p")["device_id"]
    assert cli_json(ddir, "device", "pause", device_id) == {"device_id": device_id, "paused": True, "changed": True}
    listed = cli(ddir, "device", "list")
    assert f"{device_id}\tp\t启用 (ACTIVE) 已暂停领取 (PAUSED)" in listed.stdout
    assert cli_json(ddir, "device", "resume", device_id)["changed"] is True
    paced = cli_json(ddir, "device", "pace", device_id, "--min-interval", "300", "--max-per-day", "20")
    assert (paced["min_claim_interval_seconds"], paced["max_claims_per_day"], paced["changed"]) == (300, 20, True)
    assert cli_json(ddir, "device", "list")["devices"][0]["min_claim_interval_seconds"] == 300
    only_interval = cli(ddir, "device", "pace", device_id, "--min-interval", "30")
    assert only_interval.stdout.strip() == "领取节奏：两次领取至少间隔 30 秒，每天次数不限", only_interval.stdout
    bad = cli(ddir, "device", "pace", device_id, "--min-interval", "0")
    assert bad.returncode == 1 and "1–86400" in bad.stderr
    assert cli_json(ddir, "device", "revoke", device_id)["changed"] is True
    refused = cli(ddir, "device", "pause", device_id)
    assert refused.returncode == 1 and "已撤销" in refused.stderr
    import sqlite3

    conn = sqlite3.connect(ddir / "cmbuyer.sqlite3")
    actions = [
        r[0] for r in conn.execute("SELECT action FROM audit_log WHERE subject_id = ? ORDER BY id", (device_id,))
    ]
    conn.close()
    assert actions == ["device.add", "device.pause", "device.resume", "device.pacing", "device.pacing", "device.revoke"]


def test_task_add_start_show(ddir: Path) -> None:
    created = cli_json(
        ddir, *task_add("纯棉短袖", color="黑色CHA(纯棉)", size="M(建议100-115)", quantity="2", price="30.00")
    )
    assert created["version"] == 1
    started = cli_json(ddir, "task", "start", created["task_id"])
    assert started["payment_automated"] is False and started["authorized_count"] == 1
    shown = cli_json(ddir, "task", "show", created["task_id"])
    assert shown["task"]["state"] == "PENDING" and shown["task"]["version"] == 2
    assert shown["authorization"]["state"] == "ACTIVE" and shown["submission"] is None
    again = cli(ddir, "task", "start", created["task_id"], "--json")
    assert again.returncode == 1 and "version_conflict" in again.stderr


def test_task_add_without_size(ddir: Path) -> None:
    # one-dimension goods: --size left out → no size (null), the colour alone names the option
    created = cli_json(ddir, *task_add("口红", color="#01 正红色", size=None, price="30.00"))
    cli_json(ddir, "task", "start", created["task_id"])
    shown = cli_json(ddir, "task", "show", created["task_id"])
    assert shown["task"]["sku_options"] == shown["authorization"]["sku_options"] == '[["颜色","#01 正红色"]]'

    empty = cli(ddir, *task_add(size=""))
    assert empty.returncode == 1 and "规格为空" in empty.stderr  # an empty --size is a mistake, not "none"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (
            task_add(url="https://evil.example/goods.html?goods_id=1"),
            1,
        ),
        (
            task_add(price="1.001"),  # more than two places (50, 50.0 and 50.00 are all fine)
            1,
        ),
        (("task", "show", "not-a-uuid"), 1),
        (("no-such-command",), 2),
    ],
)
def test_exit_codes(ddir: Path, args: tuple[str, ...], code: int) -> None:
    assert cli(ddir, *args).returncode == code


def test_admin_add_list_passwd(ddir: Path) -> None:
    assert cli_json(ddir, "admin", "add", "--username", "ops", "--password-stdin", stdin="long-enough-pw\n")
    assert cli(ddir, "admin", "add", "--username", "ops", "--password-stdin", stdin="long-enough-pw\n").returncode == 1
    assert cli(ddir, "admin", "add", "--username", "x", "--password-stdin", stdin="short\n").returncode == 1
    listing = cli_json(ddir, "admin", "list")
    assert [a["username"] for a in listing["admins"]] == ["ops"]
    assert "long-enough-pw" not in json.dumps(listing)
    assert cli_json(ddir, "admin", "passwd", "--username", "ops", "--password-stdin", stdin="another-password\n")


def test_doctor_and_migrate_list(ddir: Path) -> None:
    doctor = cli_json(ddir, "doctor")
    assert doctor["ok"] is True
    rows = cli_json(ddir, "migrate", "--list")["migrations"]
    assert rows and all(r["applied"] and r["checksum_ok"] for r in rows)
    # without --json: one Chinese line per check, its --json name beside the label
    lines = cli(ddir, "doctor").stdout.splitlines()
    assert len(lines) == len(doctor["checks"]) and all(line.startswith("通过 ") for line in lines), lines
    assert "通过 密钥 (secrets)：已设置" in lines and "通过 数据库迁移 (migrations)：已是最新" in lines
    assert all(line.endswith("  已应用") for line in cli(ddir, "migrate", "--list").stdout.splitlines())


def _wait_health(port: int, proc: subprocess.Popen[str]) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                return json.loads(resp.read())
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not become healthy")


def _heartbeat_with_a_secret_in_the_query(port: int, issued: dict) -> None:
    body = json.dumps(
        {
            "device_id": issued["device_id"],
            "client_version": "0.1.0",
            "adb_serial": "sim-1",
            "android_release": "16",
            "pdd_version": "8.17.0",
            "state": "READY",
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/devices/heartbeat?token=secret-in-query",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {issued['token']}",
            "X-CMBuyer-Device-ID": issued["device_id"],
        },
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def test_serve_reports_a_busy_port_before_any_serving_line(ddir: Path) -> None:
    """Nothing says "serving" unless the socket is bound; a busy port → exit 3, one line."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = cli(ddir, "serve", "--port", str(taken.getsockname()[1]))
    assert result.returncode == 3, result.stderr
    assert "无法监听 127.0.0.1:" in result.stderr and "正在服务" not in result.stderr
    # in Chinese, not asyncio's "error while attempting to bind on address …"; errno name kept
    assert "端口已被占用" in result.stderr and "EADDRINUSE" in result.stderr
    assert "error while" not in result.stderr and "address already in use" not in result.stderr.lower()


def test_serve_on_a_public_address_without_tls_is_refused_in_chinese(ddir: Path) -> None:
    """``serve --host 0.0.0.0`` without TLS → exit 3, one Chinese line naming the options."""
    result = cli(ddir, "serve", "--host", "0.0.0.0")
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "拒绝启动：0.0.0.0 不是本机回环地址，且没有配置 TLS" in line
    assert "--tls-cert/--tls-key" in line and "not a loopback" not in line


def test_serve_healthz_restart_and_tampered_checksum(ddir: Path) -> None:
    issued = cli_json(ddir, "device", "add", "--name", "p")
    for _ in range(2):  # restarting on the same data dir works
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "cmbuyer.server.cli", "--data-dir", str(ddir), "serve", "--port", str(port)],
            env={**CLEAN_ENV, "CMBUYER_LOG_LEVEL": "DEBUG"},  # the idle polls' access lines are DEBUG
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            health = _wait_health(port, proc)
            assert health["status"] == "ok" and health["migrations"] == "current"
            _heartbeat_with_a_secret_in_the_query(port, issued)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert issued["token"] not in err
        # start-up, one access line per request (route template, status, ms, device id prefix;
        # never the query string or a header), shutdown
        lines = err.splitlines()
        assert any("已启动：数据库结构为最新" in line for line in lines), err
        assert any("正在关闭" in line for line in lines), err
        beat = [line for line in lines if "POST /api/v1/devices/heartbeat 200 " in line]
        assert len(beat) == 1 and beat[0].endswith(f"device={issued['device_id'][:8]}"), err
        assert any("GET /healthz 200 " in line for line in lines), err
        assert "secret-in-query" not in err and issued["device_id"] not in err
        started = next(i for i, line in enumerate(lines) if "已启动：数据库结构为最新" in line)
        serving = next(i for i, line in enumerate(lines) if "cmbuyer-server：正在服务 http" in line)
        assert started < serving  # "serving" only once the socket is bound, after start-up
    import sqlite3

    conn = sqlite3.connect(ddir / "cmbuyer.sqlite3")
    conn.execute("UPDATE schema_migrations SET checksum = 'tampered' WHERE name = '0001_foundation.sql'")
    conn.commit()
    conn.close()
    refused = cli(ddir, "serve", "--port", str(free_port()))
    assert refused.returncode == 4 and "checksum" in refused.stderr


def test_backup_with_vacuum_into(ddir: Path, tmp_path: Path) -> None:
    cli_json(ddir, "device", "add", "--name", "p")
    out = cli_json(ddir, "backup", "--to", str(tmp_path / "b.sqlite3"))
    assert out["integrity_ok"] is True
    import sqlite3

    conn = sqlite3.connect(tmp_path / "b.sqlite3")
    assert conn.execute("SELECT count(*) FROM devices").fetchone()[0] == 1
    conn.close()
    assert cli(ddir, "backup", "--to", str(tmp_path / "b.sqlite3")).returncode == 2


def test_task_list_filters_by_state(ddir: Path) -> None:
    ids = []
    for _ in range(2):
        ids.append(cli_json(ddir, *task_add(price="9.00"))["task_id"])
    cli_json(ddir, "task", "start", ids[0])
    assert [t["task_id"] for t in cli_json(ddir, "task", "list", "--state", "PENDING")["tasks"]] == [ids[0]]
    assert {t["task_id"] for t in cli_json(ddir, "task", "list")["tasks"]} == set(ids)
    assert "草稿" in cli(ddir, "task", "list").stdout


def test_missing_data_dir_and_missing_subcommand_are_clear_one_line_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = cli(missing, "migrate", "--list")
    assert result.returncode == 4 and not missing.exists()
    assert result.stderr.strip() == f"cmbuyer-server：目录 {missing} 不存在；请先运行 `cmbuyer-server init`"
    result = cli(tmp_path, "evidence")
    assert result.returncode == 2 and result.stderr.strip().endswith("缺少必需的参数：{gc}")


def test_task_add_with_options(ddir: Path) -> None:
    # any goods: --option 维度=值, in the page's order; the colour/size flags are the special case
    base = ("task", "add", "--title", "抽纸", "--url", URL, "--quantity", "1", "--max-total-price", "30")
    created = cli_json(ddir, *base, "--option", "规格=3层100抽", "--option", "数量=6包")
    shown = cli_json(ddir, "task", "show", created["task_id"])
    assert shown["task"]["sku_options"] == '[["规格","3层100抽"],["数量","6包"]]'
    for bad, message in (
        (("--option", "规格"), "维度=值"),  # no '=': refused by the argument parser, before the database
        (("--option", "规格=a", "--option", "规格=b"), "重复"),
        (("--option", "a=1", "--option", "b=2", "--option", "c=3", "--option", "d=4"), "1–3"),
        (("--option", "规格=a", "--color", "黑色"), "sku_options"),
        ((), "规格选项"),
    ):
        done = cli(ddir, *base, *bad)
        assert done.returncode != 0 and message in done.stderr, (bad, done.stderr)


def test_every_command_and_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Every ``cmbuyer-server … --help`` runs (exit 0) and nothing in it lacks a help line."""
    from cmbuyer.server.cli import build_parser, main
    from tests.cli_help import check_every_help

    check_every_help(build_parser(), main, capsys)


def test_operator_facing_text_is_chinese() -> None:
    """Every line ``cmbuyer-server`` prints or fails with is Chinese (codes, option names and paths
    as they are); doctor's check names stay as ``--json`` names them, printed beside their Chinese label."""
    from cmbuyer.server import cli, cli_text, config, task_summary
    from tests.cli_text import english_messages

    for module in (cli, cli_text, task_summary):
        assert english_messages(Path(str(module.__file__)), codes=cli_text.DOCTOR_CHECKS) == []
    # the settings errors every command prints (the settings table beside them documents, in English)
    assert english_messages(Path(str(config.__file__)), everywhere=False) == []

"""The wordings ``cmbuyer-server`` prints more than once, in Chinese like the admin pages.

One home for each: a message the CLI gives in several places, and the help lines of options several
subcommands share. Codes stay as they are (``invalid_request``, ``PENDING``) — next to their Chinese label,
which comes from :mod:`cmbuyer.server.display.labels` (the pages' table), never a copy of it. A wording
used once stays next to its use in :mod:`cmbuyer.server.cli`; ``tests/server/test_cli.py`` checks that every
printed literal there and here has Chinese (``tests/cli_text.py``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path

from cmbuyer.server.display.labels import TASK_STATE_LABELS, label

# task state code → label, keyed by the plain code text (TASK_STATE_LABELS is keyed by the enum)
TASK_STATES: Mapping[str, str] = {str(k): v for k, v in TASK_STATE_LABELS.items()}

# -- help lines of options several subcommands share ---------------------------------------------------
DATA_DIR_HELP = "数据目录（默认 $CMBUYER_DATA_DIR，否则 ./var）"
JSON_HELP = "输出一个 JSON 对象（供脚本读取）"
DEVICE_ID_HELP = "设备 id（见 cmbuyer-server device list）"
TASK_ID_HELP = "任务 id"
EXPECTED_VERSION_HELP = "仅当任务仍是这个版本时才执行（否则拒绝）"
PASSWORD_PROMPT = "密码（至少 10 个字符）："  # noqa: S105 - a prompt, not a password

# doctor's checks: the name (``--json``'s ``name``, kept for scripts) → what a person reads
DOCTOR_CHECKS: Mapping[str, str] = {
    "sqlite_version": "SQLite 版本",
    "secrets": "密钥",
    "data_dir_private": "数据目录仅本人可读",
    "env_file_private": "设置文件仅本人可读",
    "data_dir": "数据目录",
    "pragmas": "数据库设置",
    "integrity": "数据库完整性",
    "migrations": "数据库迁移",
    "database": "数据库",
    "replication": "数据库复制",
    "tls_certificate": "TLS 证书",
}

# task import row statuses (services/task_import.py), as the import page words them
IMPORT_STATUS: Mapping[str, str] = {"ok": "可导入", "exists": "已存在", "error": "有错误"}


def no_database(path: Path, *, directory: bool = False) -> str:
    """The database (or its directory) is missing: say how to make it."""
    return f"{'目录' if directory else '数据库'} {path} 不存在；请先运行 `cmbuyer-server init`"


def storage_error(detail: object) -> str:
    """A storage failure (exit 4); ``detail`` is safe to print (no SQL, path or parameter)."""
    return f"存储出错（{detail}）"


def refusing_to_start(reason: object) -> str:
    """``serve`` will not start; ``reason`` is one line."""
    return f"拒绝启动：{reason}"


# why a socket could not be bound, by errno (asyncio's OSError text is English: "error while attempting to bind
# on address …: address already in use"); another errno → the OS's own text
_LISTEN_ERRORS: Mapping[int, str] = {
    errno.EADDRINUSE: "端口已被占用：另一个程序（或另一个 cmbuyer-server）正在使用它，请换 --port 或先停掉它",
    errno.EACCES: "没有权限：1024 以下的端口需要特权，请换一个端口",
    errno.EADDRNOTAVAIL: "本机没有这个地址",
}


def cannot_listen(host: str, port: int, exc: OSError) -> str:
    """``serve`` could not bind ``host:port``: one line in Chinese, the errno's name kept for searching."""
    name = errno.errorcode.get(exc.errno or 0, "")
    why = _LISTEN_ERRORS.get(exc.errno or 0) or (os.strerror(exc.errno) if exc.errno else str(exc))
    return f"无法监听 {host}:{port}（{why}{'；' + name if name else ''}）"


def unchanged(changed: bool) -> str:
    """The suffix of a setting that already had the value asked for."""
    return "" if changed else "（未变化）"


def coded(table: Mapping[str, str], code: str) -> str:
    """``待领取 (PENDING)``: a code's Chinese label with the code itself, searchable (the code alone when the
    table has no label)."""
    text = label(table, code)
    return f"{text} ({code})" if text != code else code


def task_line(task_id: str, state: str, version: int) -> str:
    """The one line after a task action (cancel, reset, mark-paid, reconcile)."""
    return f"任务 {task_id}：{coded(TASK_STATES, state)}（版本 v{version}）"

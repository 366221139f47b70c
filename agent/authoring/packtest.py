"""``cmbuyer-agent pack test`` and ``pack accept``: prove a selector pack on stored captures
(docs/agent.md "Proving a pack on captures").

A *capture* is a directory holding ``dump.xml``, ``screenshot.png``, ``meta.json`` and optionally the
person-confirmed ``expected.json`` or the machine-proposed ``expected.proposed.json`` (shapes: the
session contract, /work/coord/contract.md "Capture folder"). A *captures directory* is a directory whose
immediate subdirectories are captures (sorted by name), or a capture itself.

``pack test PACK CAPTURES_DIR`` reads every capture with PACK through the same code as ``inspect``
(:func:`cmbuyer.agent.authoring.inspect.inspect_dump`) and compares the screen and each reading listed in
``expected.json`` (only listed readings are compared). One line per capture, then a summary:

- ``PASS <capture>`` — every listed reading equals the reading;
- ``FAIL <capture> <key>: expected X, read Y[; …]`` — a mismatch, a capture recorded on another app
  version than the pack's, or a dump whose SHA-256 differs from ``meta.json``'s ``dump_sha256`` (tampered);
- ``UNCONFIRMED <capture> (expected.proposed.json only)`` — nobody confirmed the proposal yet;
- ``NO_EXPECTATION <capture>`` — neither file;
- ``ERROR <capture>: …`` — the capture cannot be tested (unreadable dump or meta.json, invalid
  expected.json, unknown reading key).

Exit status: 0 all PASS; 1 any FAIL, or any UNCONFIRMED / NO_EXPECTATION (``--allow-unconfirmed``
relaxes only these two, never a FAIL); 2 bad input (any ERROR, a CAPTURES_DIR that is not a directory or
holds no capture, a pack that does not load). Bad input never prints a traceback.

``pack accept CAPTURE_OR_DIR [--by NAME] [--force]`` turns each ``expected.proposed.json`` into
``expected.json`` with ``confirmed_by`` set, after printing what it accepts. It refuses (exit 2, nothing
written) to overwrite an existing ``expected.json`` unless ``--force``, and checks every proposal first:
one invalid proposal changes nothing in any capture.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmbuyer.agent.authoring.readings import READINGS
from cmbuyer.agent.errors import AgentError, ExitCode, PackError
from cmbuyer.agent.pack.files import load_pack
from cmbuyer.agent.screens.dump import MAX_DUMP_BYTES, parse_dump
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.screens.readers import SCREENS
from cmbuyer.schemas import is_money
from cmbuyer.schemas.files import FileTooLarge, read_regular
from cmbuyer.schemas.strictjson import StrictJSONError, loads_strict

DUMP = "dump.xml"
META = "meta.json"
EXPECTED = "expected.json"
PROPOSED = "expected.proposed.json"
EXPECTED_FORMAT = 1
MAX_JSON_BYTES = 256 * 1024
MAX_CONFIRMER_CHARS = 64


class CaptureInputError(ValueError):
    """A capture or its files cannot be used as test input; the message is one line naming the file
    and, for JSON, the path inside it."""


# --- the expected.json shape -------------------------------------------------------------------------


def _is_str_or_null(v: object) -> bool:
    return v is None or isinstance(v, str)


def _is_count(v: object) -> bool:
    return type(v) is int and v >= 0


def _is_str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_selected(v: object) -> bool:
    return isinstance(v, dict) and all(_is_str_or_null(x) for x in v.values())


def _is_options(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(x, list) and all(_is_str_or_null(y) for y in x) for x in v.values())


def _is_money_or_null(v: object) -> bool:
    return v is None or is_money(v)


def _is_quantity_or_null(v: object) -> bool:
    return v is None or (type(v) is int and v >= 1)


# The kinds of reading values :data:`~cmbuyer.agent.authoring.inspect.READINGS` names: each a check and
# the words an error uses (money as the canonical string inspect prints).
READING_KINDS: dict[str, tuple[Callable[[object], bool], str]] = {
    "string": (_is_str_or_null, "a string or null"),
    "money": (_is_money_or_null, 'a money string such as "59.00", or null'),
    "quantity": (_is_quantity_or_null, "an integer >= 1, or null"),
    "selected": (_is_selected, "an object {header: name or null}"),
    "options": (_is_options, "an object {header: [name or null, ...]}"),
    "count": (_is_count, "an integer >= 0"),
    "strings": (_is_str_list, "a list of strings"),
}
KNOWN_SCREENS = (*SCREENS, "unknown")
_TOP_KEYS = {"expected_format", "screen", "readings", "confirmed_by"}


@dataclass(frozen=True)
class Expectation:
    """A parsed ``expected.json`` / ``expected.proposed.json``: the screen, the listed readings (only
    these are compared) and who confirmed them (None: nobody named)."""

    screen: str
    readings: dict[str, Any]
    confirmed_by: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "expected_format": EXPECTED_FORMAT,
            "screen": self.screen,
            "readings": self.readings,
            "confirmed_by": self.confirmed_by,
        }


_NAME_RULE = f"a printable name of 1-{MAX_CONFIRMER_CHARS} characters"


def _is_name(value: object) -> bool:
    """Who confirmed: a short printable string (no control characters, no newline)."""
    return isinstance(value, str) and 0 < len(value) <= MAX_CONFIRMER_CHARS and value.isprintable()


def _read_json(path: Path, *, allow_floats: bool = False) -> Any:
    try:
        raw = read_regular(path, MAX_JSON_BYTES)
    except FileTooLarge as exc:
        raise CaptureInputError(f"{path}: {exc.strerror}") from exc
    except OSError as exc:
        raise CaptureInputError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return loads_strict(raw, allow_floats=allow_floats)
    except StrictJSONError as exc:
        raise CaptureInputError(f"{path}: not valid strict JSON (duplicate keys, floats, bad UTF-8 …)") from exc


def parse_expectation(data: Any, where: str) -> Expectation:
    """Check ``data`` against the contract's expected.json shape. Raises CaptureInputError naming
    ``where`` and the JSON path of the first problem (unknown keys included: fail closed)."""
    if not isinstance(data, dict):
        raise CaptureInputError(f"{where}: must be a JSON object")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise CaptureInputError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_TOP_KEYS))})")
    if data.get("expected_format") != EXPECTED_FORMAT or type(data.get("expected_format")) is not int:
        raise CaptureInputError(f"{where}: expected_format must be {EXPECTED_FORMAT}")
    screen = data.get("screen")
    if screen not in KNOWN_SCREENS:
        raise CaptureInputError(f"{where}: screen must be one of {', '.join(KNOWN_SCREENS)}")
    readings = data.get("readings")
    if not isinstance(readings, dict):
        raise CaptureInputError(f"{where}: readings must be an object")
    for key, value in readings.items():
        if key not in READINGS:
            raise CaptureInputError(
                f"{where}: readings.{key} is not a reading inspect prints (known: {', '.join(READINGS)})"
            )
        check, shape = READING_KINDS[READINGS[key]]
        if not check(value):
            raise CaptureInputError(f"{where}: readings.{key} must be {shape}")
    by = data.get("confirmed_by")
    if not (by is None or _is_name(by)):
        raise CaptureInputError(f"{where}: confirmed_by must be null or {_NAME_RULE}")
    return Expectation(str(screen), dict(readings), by)


def load_expectation(path: Path) -> Expectation:
    """Read and check one expectation file (CaptureInputError on any problem)."""
    return parse_expectation(_read_json(path), str(path))


# --- captures ----------------------------------------------------------------------------------------


def find_captures(root: Path) -> list[Path]:
    """The captures under ``root``: ``root`` itself when it holds ``dump.xml``, else its immediate
    subdirectories holding ``dump.xml``, sorted by name. A subdirectory that looks like a capture
    (``meta.json`` or an expectation file) but has no dump is returned too, so the caller reports it
    rather than silently testing less. Raises CaptureInputError when ``root`` is not a directory or
    holds no capture."""
    if not root.is_dir():
        raise CaptureInputError(f"{root}: not a directory")
    if (root / DUMP).exists():
        return [root]
    try:
        subdirs = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name)
    except OSError as exc:
        raise CaptureInputError(f"{root}: cannot list ({exc.strerror})") from exc
    found = [p for p in subdirs if any((p / name).exists() for name in (DUMP, META, EXPECTED, PROPOSED))]
    if not found:
        raise CaptureInputError(f"{root}: no capture (no {DUMP} in it or in its immediate subdirectories)")
    return found


@dataclass
class Mismatch:
    """One difference: ``key`` is ``screen``, a reading key, ``app_version`` or ``dump_sha256``."""

    key: str
    expected: Any
    read: Any

    def line(self) -> str:
        return f"{self.key}: expected {_show(self.expected)}, read {_show(self.read)}"


@dataclass
class CaptureResult:
    """The verdict for one capture. ``status``: PASS, FAIL, UNCONFIRMED, NO_EXPECTATION or ERROR."""

    capture: str
    status: str
    mismatches: list[Mismatch] = field(default_factory=list)
    detail: str = ""
    screen: str | None = None

    def line(self) -> str:
        if self.status == "FAIL":
            return f"FAIL {self.capture} " + "; ".join(m.line() for m in self.mismatches)
        if self.status == "ERROR":
            return f"ERROR {self.capture}: {self.detail}"
        if self.status == "UNCONFIRMED":
            return f"UNCONFIRMED {self.capture} ({PROPOSED} only)"
        return f"{self.status} {self.capture}"

    def to_json(self) -> dict[str, Any]:
        return {
            "capture": self.capture,
            "status": self.status,
            "screen": self.screen,
            "mismatches": [{"key": m.key, "expected": m.expected, "read": m.read} for m in self.mismatches],
            "detail": self.detail or None,
        }


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _integrity(capture: Path, raw_dump: bytes, pack: Pack) -> list[Mismatch]:
    """The capture belongs to the pack's app version and its dump is the one meta.json hashed."""
    meta = _read_json(capture / META, allow_floats=True)
    if not isinstance(meta, dict):
        raise CaptureInputError(f"{capture / META}: must be a JSON object")
    out: list[Mismatch] = []
    name, code = meta.get("app_version_name"), meta.get("app_version_code")
    if (name, code) != (pack.version_name, pack.version_code) or type(code) is not int:
        out.append(
            Mismatch(
                "app_version",
                f"{pack.version_name} ({pack.version_code}) as in the pack",
                f"{_show(name)} ({_show(code)}) in {META}",
            )
        )
    recorded = meta.get("dump_sha256")
    if recorded is not None:
        actual = hashlib.sha256(raw_dump).hexdigest()
        if recorded != actual:
            out.append(
                Mismatch(
                    "dump_sha256", f"{_show(recorded)} from {META}", f"{actual} (the dump was changed after capture)"
                )
            )
    return out


def check_capture(capture: Path, pack: Pack) -> CaptureResult:
    """Read one capture with ``pack`` and compare it with its expectation (never raises for bad
    input: an unusable capture is an ERROR result)."""
    name = capture.name
    try:
        try:
            raw = read_regular(capture / DUMP, MAX_DUMP_BYTES)
        except FileTooLarge as exc:
            raise CaptureInputError(f"{capture / DUMP}: {exc.strerror}") from exc
        except OSError as exc:
            raise CaptureInputError(f"{capture / DUMP}: cannot read ({exc.strerror})") from exc
        mismatches = _integrity(capture, raw, pack)
        try:
            dump = parse_dump(raw, app_package=pack.package)
        except AgentError as exc:
            raise CaptureInputError(f"{capture / DUMP}: unreadable dump ({exc.summary})") from exc
        expected: Expectation | None = None
        confirmed = (capture / EXPECTED).exists()
        if confirmed:
            expected = load_expectation(capture / EXPECTED)
        elif (capture / PROPOSED).exists():
            load_expectation(capture / PROPOSED)  # a broken proposal is reported now, not at accept
        from cmbuyer.agent.authoring.inspect import inspect_dump  # loaded by `pack test` only, not by `run`

        out = inspect_dump(dump, [pack])
    except CaptureInputError as exc:
        return CaptureResult(name, "ERROR", detail=str(exc))
    except AgentError as exc:  # inspect nulls ambiguous readings itself; anything else is no verdict
        return CaptureResult(name, "ERROR", detail=f"{capture / DUMP}: cannot be read ({exc.summary})")
    if expected is not None:
        if expected.screen != out["screen"]:
            mismatches.append(Mismatch("screen", expected.screen, out["screen"]))
        for key, value in expected.readings.items():
            if out["readings"][key] != value:
                mismatches.append(Mismatch(key, value, out["readings"][key]))
    if mismatches:
        return CaptureResult(name, "FAIL", mismatches, screen=out["screen"])
    if expected is not None:
        return CaptureResult(name, "PASS", screen=out["screen"])
    status = "UNCONFIRMED" if (capture / PROPOSED).exists() else "NO_EXPECTATION"
    return CaptureResult(name, status, screen=out["screen"])


def run_pack_test(pack: Pack, root: Path) -> list[CaptureResult]:
    """Every capture under ``root`` tested with ``pack`` (CaptureInputError for an unusable root)."""
    return [check_capture(c, pack) for c in find_captures(root)]


def exit_status(results: list[CaptureResult], allow_unconfirmed: bool) -> int:
    """2 on any ERROR, 1 on any FAIL (or unconfirmed/no expectation unless allowed), else 0."""
    statuses = {r.status for r in results}
    if "ERROR" in statuses:
        return ExitCode.USAGE
    if "FAIL" in statuses:
        return ExitCode.FAILED
    if not allow_unconfirmed and statuses & {"UNCONFIRMED", "NO_EXPECTATION"}:
        return ExitCode.FAILED
    return ExitCode.OK


# a capture's status (the PASS/FAIL … of its line and of --json) as the summary line words it
STATUS_LABELS = {"PASS": "通过", "FAIL": "失败", "UNCONFIRMED": "未确认", "NO_EXPECTATION": "没有预期", "ERROR": "出错"}


def _summary(results: list[CaptureResult]) -> dict[str, int]:
    out = dict.fromkeys(("PASS", "FAIL", "UNCONFIRMED", "NO_EXPECTATION", "ERROR"), 0)
    for r in results:
        out[r.status] += 1
    return out


def _fail(as_json: bool, message: str) -> int:
    print(json.dumps({"error": message}, ensure_ascii=False) if as_json else f"错误：{message}")
    return ExitCode.USAGE


def cmd_pack_test(args: argparse.Namespace) -> int:
    """``pack test PACK CAPTURES_DIR [--allow-unconfirmed] [--json]`` (exit codes: module doc)."""
    try:
        pack = load_pack(args.pack)
    except PackError as exc:  # already one line naming the file and the JSON path
        return _fail(args.json, str(exc))
    except AgentError as exc:
        return _fail(args.json, f"{args.pack}: {exc.summary}")
    try:
        results = run_pack_test(pack, Path(args.captures_dir))
    except CaptureInputError as exc:
        return _fail(args.json, str(exc))
    code = exit_status(results, args.allow_unconfirmed)
    counts = _summary(results)
    if args.json:
        print(
            json.dumps(
                {
                    "pack": pack.id,
                    "pack_file": str(args.pack),
                    "captures_dir": str(args.captures_dir),
                    "results": [r.to_json() for r in results],
                    "summary": counts,
                    "allow_unconfirmed": args.allow_unconfirmed,
                    "ok": code == 0,
                },
                ensure_ascii=False,
                indent=2,
            )
        )
        return code
    for r in results:
        print(r.line())
    parts = "，".join(f"{STATUS_LABELS[k]} {n} 份 ({k})" for k, n in counts.items() if n)
    verdict = {0: "通过 (OK)", 1: "失败 (FAILED)", 2: "输入有误 (INPUT ERROR)"}[code]
    print(f"{verdict}：用识别包 {pack.id} 测试了 {len(results)} 份采集样本：{parts}")
    return code


# --- accept ------------------------------------------------------------------------------------------


def _default_confirmer() -> str | None:
    try:
        return getpass.getuser()[:MAX_CONFIRMER_CHARS] or None
    except (OSError, KeyError):  # no login name (e.g. a container without a passwd entry)
        return None


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def plan_accept(root: Path, by: str | None, force: bool) -> list[tuple[Path, Expectation]]:
    """What ``pack accept`` would write: (capture, confirmed expectation) for every capture holding a
    proposal. Raises CaptureInputError (nothing written) for an unusable root, an invalid proposal,
    an ``expected.json`` it would overwrite without ``force``, or nothing to accept."""
    if by is not None and not _is_name(by):
        raise CaptureInputError(f"--by must be {_NAME_RULE}")
    plan = []
    for capture in find_captures(root):
        if not (capture / PROPOSED).exists():
            continue
        proposal = load_expectation(capture / PROPOSED)
        if (capture / EXPECTED).exists() and not force:
            raise CaptureInputError(f"{capture / EXPECTED} exists; pass --force to replace it with the proposal")
        plan.append((capture, Expectation(proposal.screen, proposal.readings, by)))
    if not plan:
        raise CaptureInputError(f"{root}: no {PROPOSED} to accept")
    return plan


def cmd_pack_accept(args: argparse.Namespace) -> int:
    """``pack accept CAPTURE_OR_DIR [--by NAME] [--force]``: print each proposal, then write it as
    ``expected.json`` (confirmed_by = --by, default the login name) and remove the proposal."""
    by = args.by if args.by is not None else _default_confirmer()
    try:
        plan = plan_accept(Path(args.capture), by, args.force)
    except CaptureInputError as exc:
        print(f"错误：{exc}")
        return ExitCode.USAGE
    for capture, expectation in plan:
        readings = " ".join(f"{k}={_show(v)}" for k, v in expectation.readings.items())
        print(f"确认 {capture.name}：screen={expectation.screen} {readings}（confirmed_by {_show(by)}）")
    for capture, expectation in plan:
        _write_atomic(capture / EXPECTED, expectation.to_json())
        (capture / PROPOSED).unlink()
    print(f"已确认 {len(plan)} 份采集样本")
    return ExitCode.OK


def add_pack_test_commands(pack_subparsers: Any) -> None:
    """Register ``test`` and ``accept`` on the ``cmbuyer-agent pack`` subparser group."""
    t = pack_subparsers.add_parser(
        "test",
        help="用 PACK 读取每份采集样本，并与它的 expected.json 比较",
        description="退出码 0：全部 PASS；1：有 FAIL（读数不符、拼多多版本不同、界面文件被改动）或有采集样本"
        "没有已确认的 expected.json；2：输入有误（ERROR 行）。",
    )
    t.add_argument("pack", metavar="PACK", help="要测试的识别包文件")
    t.add_argument(
        "captures_dir",
        metavar="CAPTURES_DIR",
        help="一份采集样本的目录，或其子目录都是采集样本的目录",
    )
    t.add_argument(
        "--allow-unconfirmed", action="store_true", help="只有 expected.proposed.json 或没有预期的采集样本不算失败"
    )
    t.add_argument("--json", action="store_true", help="输出 JSON（供脚本读取）")
    t.set_defaults(fn=cmd_pack_test)
    a = pack_subparsers.add_parser("accept", help="把 expected.proposed.json 确认为 expected.json")
    a.add_argument("capture", metavar="CAPTURE_OR_DIR", help="一个采集样本文件夹，或装着多个采集样本的文件夹")
    a.add_argument("--by", metavar="NAME", help="谁确认了这些读数（默认当前登录名）")
    a.add_argument("--force", action="store_true", help="替换已存在的 expected.json")
    a.set_defaults(fn=cmd_pack_accept)

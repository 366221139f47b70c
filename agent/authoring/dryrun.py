"""``cmbuyer-agent dry-run``: the real pre-fence flow on a phone, without the server (docs/agent.md "Dry run").

It runs :class:`cmbuyer.agent.prefence.PrefenceEngine` — the very engine ``run`` uses — for one
order given on the command line: open the product, select the options, set the quantity, read the
screen holding the submit control, run gate 1, gate 2, the payment-mode gate(s) and gate 3, and stops
there. It cannot tap the submit control by construction: it has no result sink, asks no fence and
never imports ``permit``/``submit``/``client`` (tests/agent/test_layers.py); the adapter's generic
tap refuses the submit control anyway. It makes no request to any server and needs no credentials.

What it leaves in ``--out`` (a captures directory, docs/agent.md "Captures"):

- one scrubbed capture (:mod:`cmbuyer.agent.authoring.capture`) of every screen an action was made on, taken
  just before the action, plus one at each gate and one at the end: ``01-product``,
  ``02-sku_panel``, … each with ``expected.proposed.json`` — what ``inspect`` reads on the stored dump
  with the pack (a person confirms it with ``pack accept``);
- ``session.json``: every action the adapter sent (tap with the node it aimed at, swipe, back,
  open_url) as a step from one capture to the next, for ``cmbuyer-phonesim --session``;
- ``dryrun.json``: the summary printed last.

At each gate the values the flow judged are compared with what ``inspect`` reads on that gate's
stored capture; a difference (e.g. scrubbing removed something a reader needs) is a failure
(``READINGS_DISAGREE``). Whatever happens, the order sheet is left as a failed flow leaves it
(system BACK, :func:`cmbuyer.agent.capabilities.back_out`).

Exit codes (:class:`~cmbuyer.agent.errors.ExitCode`): 0 every gate passed; 1 the flow stopped (its reason
code is printed) or readings disagree; 2 usage, phone or pack errors before the flow, or the phone failing
during it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from cmbuyer.agent import capabilities as cap
from cmbuyer.agent.authoring.capture import (
    CaptureError,
    check_foreground,
    focus_line,
    proposed,
    scrub,
    shows_phone,
    write_capture,
)
from cmbuyer.agent.errors import AgentError, ExitCode, ShutdownRequested
from cmbuyer.agent.pack.resolve import resolve_pack
from cmbuyer.agent.phone.adapter import AppVersion, PhoneAdapter
from cmbuyer.agent.prefence import GATE_STEPS, PrefenceEngine, PrefenceOrder
from cmbuyer.agent.screens.dump import Node
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.screens.text import money_str, normalize
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.schemas.text import normalize_sku

SESSION_FORMAT = 1
PHONE_FAILURES = ("ADB_ERROR", "PHONE_TIMEOUT")  # exit 2: the phone failed, not the flow


def dryrun_pack(version: AppVersion, pack_dir: Path | None) -> Pack:
    """The pack for the phone's exact app version, resolved as ``run`` resolves it
    (:func:`cmbuyer.agent.pack.resolve.resolve_pack`: an operator pack wins over a shipped one; the pack dir's
    permissions and every evidence hash are checked, because the pack's tap selectors drive the phone).
    Raises PackError (one line naming the file and the JSON path)."""
    return resolve_pack(version.name, version.code, pack_dir, check_permissions=True)


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Shot:
    name: str
    screen: str
    readings: dict[str, Any]
    tags: list[str] = field(default_factory=list)


class SessionRecorder:
    """Captures the screen before every action the adapter announces (and on request), writes each
    capture under ``out``, and records the actions as session steps between captures."""

    def __init__(
        self, phone: PhoneAdapter, pack: Pack, out: Path, version: AppVersion, progress: Callable[[str], None]
    ) -> None:
        self.phone, self.pack, self.out, self.version = phone, pack, out, version
        self.progress = progress
        self.shots: list[_Shot] = []
        self.steps: list[dict[str, Any]] = []
        self.gaps: list[str] = []
        self._current: _Shot | None = None  # the capture of the screen since the last action
        self._pending: dict[str, Any] | None = None  # the last action, waiting for the screen it led to

    def attach(self) -> None:
        self.phone.action_listener = self.on_action

    def detach(self) -> None:
        self.phone.action_listener = None

    def capture(self, tag: str | None = None) -> _Shot | None:
        """The capture of the current screen (taken now unless one exists since the last action);
        None when the app is not in front (nothing to store)."""
        if self._current is None:
            self._current = self._take()
        if self._current is not None and tag:
            self._current.tags.append(tag)
        return self._current

    def _take(self) -> _Shot | None:
        xml = self.phone.dump_raw()
        png = self.phone.screenshot_png()
        focus = focus_line(self.phone)
        try:
            check_foreground(focus, self.phone.app_package)
            scrubbed = scrub(xml, png, self.pack, self.phone.app_package)
        except CaptureError as exc:
            self.progress(f"跳过这次采集：{exc}")
            if self._pending is not None:
                self.gaps.append(f"{self._pending['action']['kind']} from {self._pending['from']}: {exc}")
                self._pending = None
            return None
        proposal = proposed(scrubbed.dump, self.pack)
        name = f"{len(self.shots) + 1:02d}-{proposal['screen']}"
        meta = {
            "label": name,
            "device": self.phone.serial,
            "captured_at": _utc_now(),
            "app_version_name": self.version.name,
            "app_version_code": self.version.code,
            "activity": focus,
            "pack_id": self.pack.id,
        }
        write_capture(self.out / name, scrubbed, meta, proposal=proposal)
        shot = _Shot(name, proposal["screen"], proposal["readings"])
        self.shots.append(shot)
        if self._pending is not None:
            self.steps.append({**self._pending, "to": name})
            self._pending = None
        return shot

    def on_action(self, action: dict[str, Any], node: Node | None) -> None:
        """Adapter hook: capture the screen the action acts on, then remember the action."""
        before = self.capture()
        self._current = None
        if before is None and action["kind"] != "open_url":
            # a step from an unknown screen would let playback follow it anywhere: leave it out
            self.gaps.append(f"{action['kind']} on a screen that could not be captured")
            self._pending = None
            return
        step: dict[str, Any] = {
            "from": "*" if action["kind"] == "open_url" or before is None else before.name,
            "action": dict(action),
        }
        if node is not None:
            step["action"]["node"] = self._node(node)
        self._pending = step

    def _node(self, node: Node) -> dict[str, Any]:
        """The tapped node for playback; its texts are left out when it lies in a privacy row."""
        private = any(sel.matches(n) for sel in self.pack.privacy_rows for n in (node, *node.ancestors()))
        block = self.pack.address_block
        private = private or shows_phone(node) or (block is not None and block.contains(node))
        b = node.bounds
        return {
            "bounds": [b.left, b.top, b.right, b.bottom],
            "text": "" if private else node.text,
            "desc": "" if private else node.desc,
            "resource_id": node.resource_id,
        }

    def finish(self) -> dict[str, Any]:
        """Capture the final screen, write ``session.json``; returns the session document."""
        self.capture("END")
        if self._pending is not None:
            self.gaps.append(f"{self._pending['action']['kind']} from {self._pending['from']}: no screen after it")
        start = self.shots[0].name if self.shots else None
        session = {
            "session_format": SESSION_FORMAT,
            "app": {"package": self.pack.package, "version_name": self.version.name, "version_code": self.version.code},
            "start": start,
            "steps": self.steps,
        }
        (self.out / "session.json").write_text(
            json.dumps(session, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )
        return session


class DryRunObserver:
    """The engine's observer for a dry run: progress lines, gate verdicts, a capture at each gate
    and the comparison of the gate's values with what ``inspect`` reads on that capture."""

    def __init__(
        self, recorder: SessionRecorder, pack: Pack, progress: Callable[[str], None], stop: threading.Event
    ) -> None:
        self.recorder, self.pack, self.progress, self.stop = recorder, pack, progress, stop
        self.started: str | None = None
        self.steps_seen: set[str] = set()
        self.verdicts: list[dict[str, Any]] = []
        self.disagreements: list[str] = []

    def event(self, step: str, outcome: str, reason: str | None = None, summary: str = "") -> None:
        self.progress(f"{step} {outcome}{' ' + reason if reason else ''}{': ' + summary if summary else ''}")
        if outcome == "STARTED":
            self.started = step
            self.steps_seen.add(step)
            return
        self.started = None
        if step in GATE_STEPS:
            self.verdicts.append({"gate": self._gate_name(step), "verdict": "PASS", "detail": summary})

    def _gate_name(self, step: str) -> str:
        # the order sheet checks the payment mode twice: when it opens (before any option tap) and on
        # the final reading
        if step == "CHECK_PAYMENT_MODE" and "SELECT_SKU" not in self.steps_seen:
            return "PAYMENT_MODE_AT_OPEN"
        return "PAYMENT_MODE" if step == "CHECK_PAYMENT_MODE" else step

    def gate_evidence(self, kind: str, read: dict[str, Any]) -> None:
        shot = self.recorder.capture(kind)
        detail = _describe(read)
        for verdict in reversed(self.verdicts):
            if verdict["verdict"] == "PASS" and verdict["gate"] in ("GATE_1", "GATE_2", "GATE_3"):
                verdict["detail"] = "; ".join(x for x in (verdict["detail"], detail) if x)
                break
        if shot is None:
            self.disagreements.append(f"{kind}: the screen could not be captured")
            return
        self.disagreements.extend(f"{shot.name}: {d}" for d in compare(read, shot.readings, self.pack))

    def checkpoint(self) -> None:
        if self.stop.is_set():
            raise ShutdownRequested("stop requested")

    def stopped(self, exc: AgentError) -> None:
        """Record the stop: a gate step that was running gets a STOP verdict."""
        if self.started in GATE_STEPS:
            self.verdicts.append(
                {
                    "gate": self._gate_name(self.started),
                    "verdict": "STOP",
                    "reason_code": exc.reason_code,
                    "detail": exc.summary,
                }
            )


def _describe(read: dict[str, Any]) -> str:
    parts: list[str] = []
    for key, value in read.items():
        if isinstance(value, dict):
            parts.extend(f"{dimension}={v}" for dimension, v in value.items())
        elif isinstance(value, Decimal):
            parts.append(f"{key}={money_str(value)}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def compare(read: dict[str, Any], readings: dict[str, Any], pack: Pack) -> list[str]:
    """Differences between what a gate judged (``read``, see PrefenceObserver.gate_evidence) and the
    inspect readings of the stored capture. ``selected`` is compared per task dimension (inspect keys it by
    the header shown, matched through the pack's alias table); the payment mode must come with no payment
    problem."""
    out = []
    for key in ("unit_price", "confirm_amount"):
        if key in read:
            mine = money_str(read[key]) if read[key] is not None else None
            if mine != readings.get(key):
                out.append(f"{key}: flow {mine} vs inspect {readings.get(key)}")
    for key in ("quantity", "submit_controls"):
        if key in read and read[key] != readings.get(key):
            out.append(f"{key}: flow {read[key]} vs inspect {readings.get(key)}")
    if "selected" in read:
        dims = list(read["selected"])
        shown = {pack.task_dimension(normalize(h), dims): v for h, v in (readings.get("selected") or {}).items()}
        for dimension, value in read["selected"].items():
            other = shown.get(dimension)
            if value is None or other is None or normalize_sku(other) != normalize_sku(value):
                out.append(f"selected {dimension}: flow {value} vs inspect {other}")
    if "payment_mode" in read and readings.get("payment_problems"):
        out.append(f"payment: flow {read['payment_mode']} vs inspect problems {readings['payment_problems']}")
    return out


@dataclass(frozen=True)
class DryRunResult:
    exit_code: ExitCode
    lines: list[str]
    summary: dict[str, Any]


def _verdict_lines(verdicts: list[dict[str, Any]]) -> list[str]:
    """One line per gate: those reached in the order reached, then the gates never reached."""
    lines = []
    for v in verdicts:
        reason = f" {v['reason_code']}" if v.get("reason_code") else ""
        lines.append(f"{v['gate']} {v['verdict']}{reason}{' — ' + v['detail'] if v.get('detail') else ''}")
    seen = {v["gate"] for v in verdicts}
    lines.extend(f"{gate} NOT_RUN" for gate in ("GATE_1", "GATE_2", "PAYMENT_MODE", "GATE_3") if gate not in seen)
    return lines


def run_dry(
    phone: PhoneAdapter,
    pack: Pack,
    version: AppVersion,
    order: PrefenceOrder,
    *,
    out: Path,
    buy_path: str,
    progress: Callable[[str], None],
    waits: FlowWaits,
    stop: threading.Event | None = None,
) -> DryRunResult:
    """One dry run on ``phone`` into the (empty or new) directory ``out``, waiting for screens as ``waits``
    says (the real flow's deadlines); see the module docstring.
    Never raises AgentError from the flow: a stop is the result (exit 1, or 2 for a phone failure)."""
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    recorder = SessionRecorder(phone, pack, out, version, progress)
    observer = DryRunObserver(recorder, pack, progress, stop or threading.Event())
    engine = PrefenceEngine(phone=phone, pack=pack, observer=observer, buy_path=buy_path, waits=waits)
    recorder.attach()
    outcome, failure = None, None
    try:
        outcome = engine.run(order)
    except AgentError as exc:
        failure = exc
        observer.stopped(exc)
        progress(f"在提交围栏前停止：{exc.reason_code} {exc.summary}")
    finally:
        backed_out = True
        try:
            cap.back_out(phone, pack)
        except AgentError:
            backed_out = False
        try:
            session = recorder.finish()
        except AgentError as exc:  # the phone failed while taking the last capture
            session = {"steps": recorder.steps, "start": None}
            progress(f"最后一次采集失败：{exc.reason_code}")
        recorder.detach()
    lines = _verdict_lines(observer.verdicts)
    if failure is not None:
        code = ExitCode.USAGE if failure.reason_code in PHONE_FAILURES else ExitCode.FAILED
        result, reason = "STOPPED", failure.reason_code
    elif observer.disagreements:
        code, result, reason = ExitCode.FAILED, "READINGS_DISAGREE", "READINGS_DISAGREE"
    else:
        code, result, reason = ExitCode.OK, "PASSED", None
    summary: dict[str, Any] = {
        "result": result,
        "reason_code": reason,
        "stopped_at": observer.started if failure is not None else None,
        "detail": failure.summary if failure is not None else None,
        "device": phone.serial,
        "app_version": f"{version.name}:{version.code}",
        "pack_id": pack.id,
        "layout": outcome.layout.id if outcome else None,
        "buy_path": buy_path,
        "gates": lines,
        "disagreements": observer.disagreements,
        "proof": _proof(outcome.proof) if outcome else None,
        "captures": str(out),
        "capture_names": [s.name for s in recorder.shots],
        "gate_captures": {tag: shot.name for shot in recorder.shots for tag in shot.tags},
        "session_steps": len(session.get("steps", [])),
        "session_gaps": recorder.gaps,
        "backed_out": backed_out,
        "fence_requested": False,
    }
    (out / "dryrun.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return DryRunResult(code, lines, summary)


def _proof(proof: Any) -> dict[str, Any]:
    return {k: (money_str(v) if isinstance(v, Decimal) else v) for k, v in vars(proof).items()}


def default_out(serial: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"./captures/{serial.replace(':', '_')}/dryrun-{stamp}")

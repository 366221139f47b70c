"""The subset of the Android shell that uiautomator2, adbutils and the agent use.

:func:`run_shell` takes the command line exactly as adb receives it (adbutils quotes list
arguments with ``shlex.quote``; uiautomator2's ``shell()`` appends ``; echo X4EXIT:$?``),
splits it on ``;``, ``&&`` and ``||`` and runs each command against the phone.
Output is bytes because ``screencap -p`` returns a PNG.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .app import CASHIERS
from .phone import Phone
from .system_ui import DEVICE_BRAND, DEVICE_MODEL, LAUNCHER, LAUNCHER_ACTIVITY

U2_JAR = "/data/local/tmp/u2.jar"


@dataclass
class ShellResult:
    """Output bytes and exit code; ``stream`` marks the uiautomator2 server launch (kept open)."""

    out: bytes
    rc: int = 0
    stream: bool = False


@cache
def u2_jar_md5() -> str:
    """md5 of the jar shipped in the installed uiautomator2 wheel, so u2 skips pushing it."""
    try:
        data = resources.files("uiautomator2").joinpath("assets/u2.jar").read_bytes()
    except (OSError, ModuleNotFoundError):
        return "0" * 32
    return hashlib.md5(data).hexdigest()  # noqa: S324 - same (non-security) check as uiautomator2


def _split(cmdline: str) -> list[tuple[str, list[str]]]:
    """[(operator before, argv)] for ``a; b && c``; operator is "", ";", "&&" or "||"."""
    lex = shlex.shlex(cmdline, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    out: list[tuple[str, list[str]]] = []
    op, argv = "", list[str]()
    for tok in lex:
        if tok in (";", "&&", "||", "&", "|"):
            if argv:
                out.append((op, argv))
            op, argv = tok, []
        else:
            argv.append(tok)
    if argv:
        out.append((op, argv))
    return out


def run_shell(phone: Phone, cmdline: str) -> ShellResult:
    """Run a command line; returns the combined output and the last exit code."""
    try:
        parts = _split(cmdline)
    except ValueError as exc:  # unbalanced quotes
        return ShellResult(f"/system/bin/sh: syntax error: {exc}\n".encode(), 2)
    out = bytearray()
    rc = 0
    for op, argv in parts:
        if (op == "&&" and rc != 0) or (op == "||" and rc == 0):
            continue
        argv = [a.replace("$?", str(rc)) for a in argv]
        while argv and "=" in argv[0] and not argv[0].startswith("="):
            argv.pop(0)  # VAR=value prefix (CLASSPATH=... app_process ...)
        if not argv:
            continue
        result = _command(phone, argv)
        if result.stream:
            return result
        out += result.out
        rc = result.rc
    phone.journal.record("shell", cmd=cmdline[:500], rc=rc)
    return ShellResult(bytes(out), rc)


def _text(s: str, rc: int = 0) -> ShellResult:
    return ShellResult(s.encode("utf-8"), rc)


def _command(phone: Phone, argv: list[str]) -> ShellResult:
    name = argv[0].rsplit("/", 1)[-1]
    if name == "toybox" and len(argv) > 1:
        argv, name = argv[1:], argv[1]
    handler = _COMMANDS.get(name)
    if handler is None:
        return _text(f"/system/bin/sh: {argv[0]}: inaccessible or not found\n", 127)
    return handler(phone, argv[1:])


def _echo(phone: Phone, args: list[str]) -> ShellResult:
    return _text(" ".join(args) + "\n")


def _md5(phone: Phone, args: list[str]) -> ShellResult:
    lines, rc = [], 0
    for path in args:
        if path == U2_JAR:
            lines.append(f"{u2_jar_md5()}  {path}")
        else:
            lines.append(f"md5sum: {path}: No such file or directory")
            rc = 1
    return _text("\n".join(lines) + "\n", rc)


def props(phone: Phone) -> dict[str, str]:
    dev = phone.cfg.device
    model = str(dev.get("model", DEVICE_MODEL))
    return {
        "ro.serialno": phone.serial,
        "ro.build.version.sdk": str(dev.get("sdk", 33)),
        "ro.build.version.release": str(dev.get("release", "13")),
        "ro.product.brand": str(dev.get("brand", DEVICE_BRAND)),
        "ro.product.manufacturer": str(dev.get("brand", DEVICE_BRAND)),
        "ro.product.model": model,
        "ro.product.name": model,
        "ro.product.device": "OP5961L1",
        "ro.product.cpu.abi": "arm64-v8a",
        "ro.build.characteristics": "default",
        "sys.boot_completed": "1",
    }


def _getprop(phone: Phone, args: list[str]) -> ShellResult:
    p = props(phone)
    if args:
        return _text(p.get(args[0], "") + "\n")
    return _text("".join(f"[{k}]: [{v}]\n" for k, v in sorted(p.items())))


def _wm(phone: Phone, args: list[str]) -> ShellResult:
    if args[:1] == ["size"]:
        return _text("Physical size: 1080x2400\n")
    if args[:1] == ["density"]:
        return _text("Physical density: 480\n")
    return _text("", 0)


def _focus(phone: Phone) -> tuple[str, str]:
    """(package, activity) of the focused window (the phone decides; see :meth:`Phone.focus`)."""
    return phone.focus()


def _page_url(phone: Phone) -> str:
    return phone.page_url()


def _dumpsys(phone: Phone, args: list[str]) -> ShellResult:
    what = args[0] if args else ""
    if what == "window":
        pkg, act = _focus(phone)
        return _text(
            "WINDOW MANAGER WINDOWS (dumpsys window windows)\n"
            "  Window #0 Window{5f1c2a8 u0 NavigationBar0}:\n"
            "  Window #1 Window{3b9e7d1 u0 StatusBar}:\n"
            f"  Window #2 Window{{8a3f2c1 u0 {pkg}/{act}}}:\n"
            f"  mCurrentFocus=Window{{8a3f2c1 u0 {pkg}/{act}}}\n"
            f"  mFocusedApp=ActivityRecord{{7d2e9b0 u0 {pkg}/{act} t57}}\n"
        )
    if what == "activity":
        with phone.lock:
            pkg, act = _focus(phone)
            sub = args[1] if len(args) > 1 else "activities"
            if sub == "top":
                url = _page_url(phone) if pkg == phone.cfg.app.package else ""
                lines = [
                    f"TASK {pkg} id=57 userId=0",
                    f"  ACTIVITY {pkg}/{act} 8f3a2b1 pid={phone.pid if pkg == phone.cfg.app.package else 1893}",
                    "    Local Activity 1c2d3e4 State:",
                    "      mResumed=true mStopped=false mFinished=false",
                ]
                if url:
                    lines.append(
                        f"      mIntent=Intent {{ act=android.intent.action.VIEW dat={url} flg=0x10000000 "
                        f"cmp={pkg}/{act} }}"
                    )
                if pkg != LAUNCHER:
                    lines += [
                        f"TASK {LAUNCHER} id=1 userId=0",
                        f"  ACTIVITY {LAUNCHER_ACTIVITY} 2a1b3c4 pid=1893",
                    ]
                return _text("\n".join(lines) + "\n")
            return _text(f"  mResumedActivity: ActivityRecord{{7d2e9b0 u0 {pkg}/{act} t57}}\n")
    if what == "package":
        return _dumpsys_package(phone, args[1] if len(args) > 1 else "")
    if what == "display":
        return _text(
            "DISPLAY MANAGER (dumpsys display)\n  mDefaultViewport= orientation=0 deviceWidth=1080 deviceHeight=2400\n"
        )
    if what == "power":
        return _text("POWER MANAGER (dumpsys power)\n  mWakefulness=Awake\n  Display Power: state=ON\n")
    if what == "battery":
        return _text(
            "Current Battery Service state:\n  AC powered: false\n  USB powered: true\n  level: 80\n"
            "  scale: 100\n  status: 2\n  health: 2\n  present: true\n  temperature: 300\n"
            "  voltage: 4200\n  technology: Li-ion\n"
        )
    return _text("")


def _dumpsys_package(phone: Phone, package: str) -> ShellResult:
    app = phone.cfg.app
    if package != app.package:
        return _text("")

    def block(name: str, code: int, stamp: str) -> str:
        return (
            f"  Package [{app.package}] (3b2a1c9):\n"
            "    userId=10234\n"
            f"    pkg=Package{{7f3e2a1 {app.package}}}\n"
            f"    codePath=/data/app/~~Xc9f2QbT==/{app.package}-3Lq2ZQ==\n"
            "    primaryCpuAbi=arm64-v8a\n"
            f"    versionCode={code} minSdk=21 targetSdk=30\n"
            f"    versionName={name}\n"
            "    flags=[ HAS_CODE ALLOW_CLEAR_USER_DATA ALLOW_BACKUP ]\n"
            f"    timeStamp={stamp}\n"
            "    firstInstallTime=2024-03-02 18:20:11\n"
            f"    lastUpdateTime={stamp}\n"
            "    signatures=PackageSignatures{1a2b3c4 version:2, signatures:[5e8a6a1f], past signatures:[]}\n"
            "    pkgFlags=[ HAS_CODE ALLOW_CLEAR_USER_DATA ALLOW_BACKUP ]\n"
        )

    text = (
        "Activity Resolver Table:\n  Non-Data Actions:\n      android.intent.action.MAIN:\n"
        f"        5d8a1b2 {app.package}/.ui.activity.MainFrameActivity filter 9a7c3d1\n\n"
        "Packages:\n" + block(app.version_name, app.version_code, "2025-01-10 09:12:33")
    )
    with phone.lock:
        for fault in phone.faults.active("duplicate_version", phone.counters, phone.screen):
            # e.g. a staged update or an old copy under "Hidden system packages"
            text += "\nHidden system packages:\n" + block(
                str(fault.params["version_name"]), int(fault.params["version_code"]), "2024-03-02 18:20:11"
            )
    return _text(text)


def _pm(phone: Phone, args: list[str]) -> ShellResult:
    pkg = phone.cfg.app.package
    if args[:1] == ["path"]:
        if args[1:2] == [pkg] or args[1:2] in ([p] for p, _ in CASHIERS.values()):
            return _text(f"package:/data/app/~~Xc9f2QbT==/{args[1]}-3Lq2ZQ==/base.apk\n")
        return _text("", 1)
    if args[:1] == ["list"]:
        return _text(
            "".join(
                f"package:{p}\n"
                for p in (
                    pkg,
                    "com.tencent.mm",
                    "com.eg.android.AlipayGphone",
                    "com.android.settings",
                    LAUNCHER,
                )
            )
        )
    return _text("Success\n")


def _am(phone: Phone, args: list[str]) -> ShellResult:
    if not args:
        return _text("usage: am [subcommand]\n", 1)
    sub, rest = args[0], args[1:]
    if sub == "force-stop":
        for pkg in rest:
            phone.force_stop(pkg)
        return _text("")
    if sub in ("start", "start-activity"):
        url = component = action = None
        i = 0
        while i < len(rest):
            opt = rest[i]
            if opt in ("-d", "-a", "-n", "-c", "-t", "--user", "-e", "--es", "--ei", "--ez", "-f"):
                val = rest[i + 1] if i + 1 < len(rest) else ""
                if opt == "-d":
                    url = val
                elif opt == "-n":
                    component = val
                elif opt == "-a":
                    action = val
                i += 3 if opt in ("-e", "--es", "--ei", "--ez") else 2
            else:
                i += 1
        if url is not None:
            opened = phone.deep_link(url)
            if opened is None:
                return _text(
                    f"Starting: Intent {{ act={action} dat={url} }}\n"
                    "Error: Activity not started, unable to resolve Intent\n",
                    1,
                )
            return _text(f"Starting: Intent {{ act={action} dat={url} }}\n")
        if component and component.startswith(phone.cfg.app.package + "/"):
            phone.launch_app()
            return _text(f"Starting: Intent {{ cmp={component} }}\n")
        return _text("Error: Activity not started, unable to resolve Intent\n", 1)
    if sub == "broadcast":
        return _text("Broadcasting: Intent { }\nBroadcast completed: result=0\n")
    return _text("")


def _monkey(phone: Phone, args: list[str]) -> ShellResult:
    if "-p" in args and args[args.index("-p") + 1 : args.index("-p") + 2] == [phone.cfg.app.package]:
        phone.launch_app()
        return _text("Events injected: 1\n")
    return _text("** No activities found to run, monkey aborted.\n", 251)


def _input(phone: Phone, args: list[str]) -> ShellResult:
    if args and args[0] in ("touchscreen", "touchpad", "keyboard"):
        args = args[1:]
    if args and args[0] == "-d":
        args = args[2:]
    if not args:
        return _text("Usage: input [<source>] <command> [<arg>...]\n", 1)
    cmd, rest = args[0], args[1:]
    try:
        if cmd == "tap" and len(rest) == 2:
            phone.tap(int(float(rest[0])), int(float(rest[1])), via="input_tap")
            return _text("")
        if cmd == "keyevent" and rest:
            for key in rest:
                if not key.startswith("--"):
                    phone.key(key, via="input_keyevent")
            return _text("")
        if cmd in ("swipe", "draganddrop") and len(rest) >= 4:
            phone.swipe([int(float(v)) for v in rest[:4]], via="input_" + cmd)
            return _text("")
        if cmd == "text" and rest:
            phone.input_text(" ".join(rest), via="input_text")
            return _text("")
    except ValueError:
        pass
    return _text(f"Error: Invalid arguments for command: {cmd}\n", 1)


def _screencap(phone: Phone, args: list[str]) -> ShellResult:
    if "-p" not in args:
        return _text("screencap: raw output is not supported by the simulator, use -p\n", 1)
    return ShellResult(phone.screenshot("png"))


def _ps(phone: Phone, args: list[str]) -> ShellResult:
    lines = [
        "USER           PID  PPID     VSZ    RSS WCHAN            ADDR S NAME",
        "root             1     0 2173292  10460 0                   0 S init",
        "u0_a93        1893   702 6431044 198220 0                   0 S " + LAUNCHER,
    ]
    if phone.app_running():
        lines.append(
            f"u0_a234      {phone.pid:>5}   702 9102344 512004 0                   0 S {phone.cfg.app.package}"
        )
    return _text("\n".join(lines) + "\n")


def _pidof(phone: Phone, args: list[str]) -> ShellResult:
    if args[:1] == [phone.cfg.app.package] and phone.app_running():
        return _text(f"{phone.pid}\n")
    return _text("", 1)


def _app_process(phone: Phone, args: list[str]) -> ShellResult:
    if "com.wetest.uia2.Main" in args:
        return ShellResult(b"[server] INFO: [UiAutomator2Server] Starting Server\n", 0, stream=True)
    return _text("Error: no class name or --zygote supplied.\n", 1)


def _uiautomator(phone: Phone, args: list[str]) -> ShellResult:
    # only one UiAutomation client per phone: a second one fails like on a real device
    return _text("ERROR: could not get idle state.\n", 1)


def _ok(phone: Phone, args: list[str]) -> ShellResult:
    return _text("")


def _settings(phone: Phone, args: list[str]) -> ShellResult:
    return _text("1\n" if args[:1] == ["get"] else "")


_COMMANDS = {
    "echo": _echo,
    "md5sum": _md5,
    "md5": _md5,
    "getprop": _getprop,
    "wm": _wm,
    "dumpsys": _dumpsys,
    "pm": _pm,
    "cmd": _ok,
    "am": _am,
    "monkey": _monkey,
    "input": _input,
    "screencap": _screencap,
    "ps": _ps,
    "pidof": _pidof,
    "app_process": _app_process,
    "uiautomator": _uiautomator,
    "settings": _settings,
    "ime": _ok,
    "rm": _ok,
    "mkdir": _ok,
    "chmod": _ok,
    "true": _ok,
    "sleep": _ok,
}

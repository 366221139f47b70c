"""The shipped packs are exactly what their generators write (agent/authoring/make_pack.py, then
make_after_submit.py): a hand edit of a pack, or a generator change that was not run, fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cmbuyer.agent.authoring import make_after_submit, make_pack
from cmbuyer.agent.authoring.make_after_submit import with_after_submit
from cmbuyer.agent.authoring.make_pack import build, render
from cmbuyer.agent.pack.files import shipped_pack_dir


def test_the_shipped_packs_are_what_the_generators_write() -> None:
    packs = shipped_pack_dir()
    built = [with_after_submit(pack, packs) for pack in build(packs)]
    assert sorted(f"{p['id']}.json" for p in built) == sorted(f.name for f in packs.glob("*.json"))
    for pack in built:
        assert render(pack) == (packs / f"{pack['id']}.json").read_text("utf-8"), pack["id"]


def test_make_pack_help_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the generator writes into the shipped pack directory: pointed at an empty folder, any write shows
    monkeypatch.setattr(make_pack, "shipped_pack_dir", lambda: tmp_path)
    for argv in (["--help"], ["agent/packs/pdd-8.17.0-81700.json"]):
        with pytest.raises(SystemExit) as exit_:
            make_pack.main(argv)
        assert exit_.value.code == (0 if argv == ["--help"] else 2)
    assert list(tmp_path.iterdir()) == []


def test_make_after_submit_refuses_in_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        make_after_submit.main(["--help"])
    assert exit_.value.code == 0 and "PACK.json" in capsys.readouterr().out
    shipped = shipped_pack_dir() / "pdd-8.17.0-81700.json"
    # a pack without its section, beside the shipped evidence: a write would show in its bytes
    pack = json.loads(shipped.read_text("utf-8"))
    del pack["after_submit"]
    good = tmp_path / shipped.name
    good.write_text(render(pack), encoding="utf-8")
    before = good.read_bytes()
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    (tmp_path / "other.json").write_text('{"id": "site-1.0.0"}', encoding="utf-8")
    for bad in ([], [str(tmp_path / "missing.json")], [str(good), str(tmp_path / "broken.json")]):
        with pytest.raises(SystemExit) as exit_:
            make_after_submit.main(bad)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "Traceback" not in err and ": error: " in err.strip().splitlines()[-1]
    with pytest.raises(SystemExit, match="2"):
        make_after_submit.main([str(tmp_path / "other.json")])
    assert "not a pack this generator has an after_submit section for" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        make_after_submit.main([str(good)])  # the evidence it hashes is not beside this copy
    assert "No such file" in capsys.readouterr().err and good.read_bytes() == before
    (tmp_path / "evidence").symlink_to(shipped_pack_dir() / "evidence")
    make_after_submit.main([str(good)])
    assert good.read_bytes() == shipped.read_bytes()

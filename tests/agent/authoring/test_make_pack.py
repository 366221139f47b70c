"""The shipped packs are exactly what their generators write (agent/authoring/make_pack.py, then
make_after_submit.py): a hand edit of a pack, or a generator change that was not run, fails here."""

from __future__ import annotations

from cmbuyer.agent.authoring.make_after_submit import with_after_submit
from cmbuyer.agent.authoring.make_pack import build, render
from cmbuyer.agent.pack.files import shipped_pack_dir


def test_the_shipped_packs_are_what_the_generators_write() -> None:
    packs = shipped_pack_dir()
    built = [with_after_submit(pack, packs) for pack in build(packs)]
    assert sorted(f"{p['id']}.json" for p in built) == sorted(f.name for f in packs.glob("*.json"))
    for pack in built:
        assert render(pack) == (packs / f"{pack['id']}.json").read_text("utf-8"), pack["id"]

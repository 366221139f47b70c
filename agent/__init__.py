"""cmbuyer purchasing agent (docs/architecture.md "Agent").

One agent process drives one Android phone through uiautomator2 + adbutils and turns a claimed
purchase task into at most one pending-payment Pinduoduo order. Package map:

- ``screens/``  dump parsing, text/money normalization, the compiled pack model, screen readers (pure, no I/O)
- ``phone/``    the adapter over uiautomator2/adbutils (deadlines, stable reads, guarded taps)
- ``pack/``     selector packs from files: compile, evidence, files, resolve (shipped + operator pack dir)
- ``packs/``    one selector pack JSON per Pinduoduo version
- ``authoring/`` pack authoring tools (capture, dry run, inspect/explain, pack test); never on the run path
- ``client``    the only HTTP speaker (TaskSource / ResultSink over the device API)
- ``permit``    SubmissionPermit (built only by ``client`` from a first fence response)
- ``submit``    the only module that taps the submit control
- ``flow``      the purchase orchestrator; ``gates``, ``lease``, ``journal``, ``runner``, ``cli``
"""

__version__ = "0.1.0"

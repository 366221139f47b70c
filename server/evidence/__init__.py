"""Evidence screenshots (spec 002 事件与证据): PNG validation (:mod:`.png`) and the content-addressed
file store (:mod:`.files`). No HTTP and no SQL here."""

"""Evidence screenshots (docs/api.md "POST /api/v1/tasks/{id}/evidence"): PNG validation (:mod:`.png`) and the
content-addressed file store (:mod:`.files`). No HTTP and no SQL here."""

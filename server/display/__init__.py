"""What people read, shared by the admin pages and the command line: Chinese labels for codes
(:mod:`.labels`), times in Beijing time (:mod:`.times`), the task detail model (:mod:`.task_view`) and the
task export rows (:mod:`.task_export`). No HTTP: the command line imports these, never ``web/``."""

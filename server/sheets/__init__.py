"""Task spreadsheets in and out: :mod:`.read` turns an uploaded ``.xlsx``/``.csv`` into rows of
plain cell values within hard bounds; :mod:`.write` writes rows as ``.xlsx``/``.csv`` with every text cell
made safe against formula injection. No database, no HTTP."""

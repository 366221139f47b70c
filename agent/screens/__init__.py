"""Pure screen logic: dump parsing, normalization, money, selector packs, readers (no I/O)."""

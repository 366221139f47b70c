"""Pure screen logic: dump parsing, normalization, money, the compiled pack model, readers (no I/O)."""

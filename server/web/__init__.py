"""HTTP edge: one module per route group; only parsing, authentication and mapping to use-cases."""

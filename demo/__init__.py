"""`make demo`: the whole system on one machine — server, simulated phones, one agent per phone."""

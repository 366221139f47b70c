"""cmbuyer-server: admin pages, the device API, claims, leases, the submission fence, evidence, audit."""

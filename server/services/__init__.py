"""Use-cases: each is one synchronous job ``fn(conn, …)`` run inside one write transaction
(``Database.write`` in the server, ``run_in_transaction`` in the CLI), so the admin pages, the device
API and the CLI share exactly the same code. Every state change writes its audit row in that same
transaction."""

"""Transaction helpers shared by the use-cases in :mod:`cmbuyer.server.services`.

Each helper runs inside the caller's write transaction and is a step of several use-cases: who acts and
fresh ids (:mod:`.common`), the audit row of an actor's action (:mod:`.audit`), idempotency records
(:mod:`.idempotency`), the opening of every device write and the request it names (:mod:`.device_tx`),
loading the current claim (:mod:`.claim_check`), state writes from the rows a job read (:mod:`.moves`)
and the supervision steps other use-cases take (:mod:`.supervision`). They load and write through the
store and decide with the domain; services import them, never each other, and nothing here imports a
service.
"""

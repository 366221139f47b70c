"""Pure business rules: states, allowed transitions, value validation. No I/O, no SQL, no clock reads
(time comes in as arguments)."""

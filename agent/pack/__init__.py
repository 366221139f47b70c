"""Selector packs from files: compile (pack JSON → :class:`~cmbuyer.agent.screens.packmodel.Pack`, pure),
evidence (the capture files a pack names, re-hashed), files (one pack file read), resolve (which pack
serves an app version: shipped packs and the operator pack directory)."""

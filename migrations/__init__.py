"""Numbered plain-SQL migrations, shipped as package data (``cmbuyer.migrations``); see server/migrate.py."""

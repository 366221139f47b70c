"""Shipped selector packs (one JSON per Pinduoduo version)."""

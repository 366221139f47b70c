"""The phone adapter over uiautomator2 + adbutils (docs/architecture.md "Agent")."""

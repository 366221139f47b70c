"""The phone adapter over uiautomator2 + adbutils (design §7.3)."""

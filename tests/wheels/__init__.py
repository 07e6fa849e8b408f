"""The wheels users install."""

"""triggers."""

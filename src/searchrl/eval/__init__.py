"""eval layer."""

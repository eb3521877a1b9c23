"""algo layer."""

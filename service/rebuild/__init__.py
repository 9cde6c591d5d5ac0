"""rebuild."""

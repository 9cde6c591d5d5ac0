"""waste."""

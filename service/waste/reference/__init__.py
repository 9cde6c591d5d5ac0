"""The per-event waste rules as first written: the reference the cell-based rules are held
equal to (tests/unit/waste/test_cells_property.py)."""

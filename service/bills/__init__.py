"""Reconciliation against the provider's bill: FOCUS imports, per-project mappings, drift."""

"""Webhook targets: where a webhook may send (`checks`: URL rules, address classes, pinned
sending; SSRF) and which parts of a webhook are secrets (`redaction`)."""

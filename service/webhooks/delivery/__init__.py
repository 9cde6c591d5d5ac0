"""Webhook delivery: the outbox filled from the alerts streams (`dispatch`), the worker that
leases, sends, retries and dead-letters (`worker`), HTTP and SMTP sending (`sending`, `smtp`)."""

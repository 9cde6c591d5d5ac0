"""trainledger service: domain rules, the Redis storage adapter, HTTP routes and alert delivery."""

__version__ = "0.1.0"

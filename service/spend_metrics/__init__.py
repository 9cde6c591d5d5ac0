"""Spend, budget use and forecasts as Prometheus gauges, read at scrape time."""

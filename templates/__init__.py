"""Jinja2 templating in a sandbox: timestamp, timedelta and validation checks."""

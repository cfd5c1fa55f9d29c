"""Leasing: exporters, leases, access policies, the queue and registration (docs/leasing.md). Imports no provisioning."""

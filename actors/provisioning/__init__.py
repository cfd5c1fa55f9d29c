"""Provisioning: claims, pools, handles and providers (docs/claims.md). Imports no leasing."""

"""lessor: leases devices and binds provisioned environments, as an asyncio actor system."""

__version__ = "0.1.0"

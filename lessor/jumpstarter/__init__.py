"""Jumpstarter's gRPC protocol in front of lessor's actors (docs/jumpstarter-grpc.md).

`tokens` mints and checks the bearer tokens (no grpc needed); `service` and `server` import grpc and the
`jumpstarter-protocol` stubs, so only `lessor run --grpc-port` loads them (the `[jumpstarter]` extra).
"""

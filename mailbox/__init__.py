"""The actor runtime: mailboxes, supervision, timers, tracing. Knows nothing of Kubernetes."""

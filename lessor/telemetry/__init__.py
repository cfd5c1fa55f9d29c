"""OpenTelemetry tracing of actor messages, and the trace file of `lessor trace`."""

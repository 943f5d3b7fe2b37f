"""hooks."""

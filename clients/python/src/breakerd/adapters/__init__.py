"""Adapters for agent frameworks; each imports its framework only when it
is imported itself, so the core stays dependency-free."""

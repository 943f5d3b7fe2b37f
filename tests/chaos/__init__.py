"""Chaos suite: writers, a round worker and fault injectors running against real PostgreSQL, Spark and Iceberg."""

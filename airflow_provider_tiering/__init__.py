"""Tier hot-store tables into Apache Iceberg, exactly once, one Airflow task per table."""

from __future__ import annotations

__version__ = "0.1.0"

"""Airflow-free kernel: table spec, state machine, planner and the round protocol."""

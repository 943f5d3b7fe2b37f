"""The Tiering page and REST API in Airflow's API server: an Airflow 3 plugin (``fastapi_apps``, ``external_views``).

``tiering_plugin.TieringPlugin`` is what Airflow loads; ``app.create_app`` builds the FastAPI app behind it on its
first request (``api`` for JSON, ``page`` for the HTML page, ``access`` for Airflow's authorization checks).
"""

"""The Tiering page and REST API in Airflow's API server: an Airflow 3 plugin (``fastapi_apps``, ``react_apps``).

``tiering_plugin.TieringPlugin`` is what Airflow loads; ``app.create_app`` builds the FastAPI app behind it on its
first request (``api`` for JSON, ``page`` for the page's bundle, ``access`` for Airflow's authorization checks);
``addresses`` holds where both put the app and the page.
The page's source is ``www/`` (TypeScript, React, Chakra UI: Airflow's UI stack), built into ``www/dist/``.
"""

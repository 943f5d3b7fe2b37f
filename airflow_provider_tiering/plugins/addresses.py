"""Where the tiering app and its page are found: the app's mount point in Airflow's API server, the page's route in
Airflow's UI, and the file name of the page's bundle.

Below both the plugin (``tiering_plugin.py``, which registers them with Airflow) and the app that serves them
(``page.py``), so that neither imports the other: plain constants, light enough for every process that imports the
plugin.
"""

from __future__ import annotations

URL_PREFIX = "/tiering"
#: The page's route in Airflow's UI: ``/plugin/<PAGE_ROUTE>``.
PAGE_ROUTE = "tiering"
#: The page's bundle, built from ``plugins/www`` (``npm run build``) into ``plugins/www/dist``.
BUNDLE = "tiering.js"

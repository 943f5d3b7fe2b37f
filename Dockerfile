# The image of every service in docker-compose.yml: Airflow 3.3.2 (official image) + Java 17 for Spark + this
# provider with the same pinned dependencies as the native setup (requirements.lock). The Spark master and
# workers run from the same image: pyspark's package is a Spark distribution, and executors need this
# provider and its Python dependencies to read the hot store and write the warehouse.

# The Tiering page (a React app for Airflow's UI), built with npm from its lock file; the image gets the bundle only.
FROM node:20-bookworm-slim AS page
WORKDIR /page
COPY airflow_provider_tiering/plugins/www/package.json airflow_provider_tiering/plugins/www/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY airflow_provider_tiering/plugins/www/tsconfig.json airflow_provider_tiering/plugins/www/vite.config.ts ./
COPY airflow_provider_tiering/plugins/www/src ./src
RUN npm run build

FROM apache/airflow:3.3.2-python3.11

USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64

USER airflow
COPY --chown=airflow:root requirements.lock /opt/tiering/requirements.lock
# Only the runtime pins: the image needs neither the test tools nor the browser driver.
RUN grep -v -E '^(pytest|pytest-timeout|ruff|selenium|tpchgen-cli|PySocks|trio|trio-websocket|outcome|wsproto|sortedcontainers)==' \
        /opt/tiering/requirements.lock > /tmp/runtime.lock \
    && pip install --no-cache-dir -r /tmp/runtime.lock "pyiceberg[sql-postgres]==0.12.0"
COPY --chown=airflow:root pyproject.toml setup.py MANIFEST.in README.md /opt/tiering/
COPY --chown=airflow:root airflow_provider_tiering /opt/tiering/airflow_provider_tiering
COPY --from=page --chown=airflow:root /page/dist /opt/tiering/airflow_provider_tiering/plugins/www/dist
RUN pip install --no-cache-dir --no-deps /opt/tiering

# Spark's launcher scripts, from the installed pyspark; workers run Python UDFs with this interpreter.
ENV SPARK_HOME=/home/airflow/.local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python
RUN test -x "$SPARK_HOME/bin/spark-class" && python -c "import airflow_provider_tiering, pyspark, pyiceberg"

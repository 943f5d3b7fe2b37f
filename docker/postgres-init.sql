-- One PostgreSQL server, three databases: Airflow's metadata, the hot store, the Iceberg SQL catalog.
CREATE USER tiering WITH PASSWORD 'tiering';
CREATE DATABASE airflow OWNER tiering;
CREATE DATABASE hot OWNER tiering;
CREATE DATABASE iceberg_catalog OWNER tiering;

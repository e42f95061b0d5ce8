# One image for every spanner-cdc service of docker-compose.yml: Airflow (with the DAGs and the plugin),
# the Spark master / worker / Connect server (pyspark ships Spark's jars and launch scripts, so the
# cluster runs the same Spark and Python as the jobs it serves) and the local Spanner server.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 50000 --gid 0 cdc

ENV JAVA_HOME=/usr/lib/jvm/default-java \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    AIRFLOW_HOME=/opt/airflow

WORKDIR /opt/spanner-cdc
# Dependencies first (cached until pyproject.toml changes), then the code. The install is editable
# because the store reads its migrations from sql/ next to the package.
COPY pyproject.toml README.md ./
COPY spanner_cdc ./spanner_cdc
RUN python -m venv /opt/venv \
 && pip install --no-cache-dir --upgrade pip \
 && pip install --no-cache-dir -e .
COPY sql ./sql
COPY dags ./dags
COPY plugins ./plugins
COPY spark_jobs ./spark_jobs
COPY config ./config

RUN mkdir -p /opt/airflow /data/lake /data/local-spanner && chown -R 50000:0 /opt/airflow /data
USER 50000
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["spanner-cdc", "--help"]

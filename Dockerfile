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

# The package is built into a wheel and installed from it, as a deployment installs it (no checkout on the path):
# [spark] for the drivers and the cluster's own pyspark, [local] for the local Spanner server of the stack.
COPY pyproject.toml README.md /tmp/src/
COPY spanner_cdc /tmp/src/spanner_cdc
RUN python -m venv /opt/venv \
 && pip install --no-cache-dir --upgrade pip \
 && pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/dist /tmp/src \
 && pip install --no-cache-dir "$(ls /tmp/dist/spanner_cdc-*.whl)[spark,local]" \
 && rm -rf /tmp/src /tmp/dist
WORKDIR /opt/spanner-cdc
# The stack's DAG files, streams file and spark-submit entry (the UI plugin comes from the package's entry point).
COPY dags ./dags
COPY spark_jobs ./spark_jobs
COPY config ./config

RUN mkdir -p /opt/airflow /data/lake /data/local-spanner && chown -R 50000:0 /opt/airflow /data
USER 50000
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["spanner-cdc", "--help"]

# The image of docker-compose.yml's worker, topic creation and review service. It runs as an
# unprivileged user (uid 10001); /data (the worker's RocksDB) and /review (the reviewers file)
# belong to it, so named volumes mounted there are writable.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STREAM_ADAPTER_DEMO_LEDGER=/data/demo-ledger.jsonl
RUN groupadd --system --gid 10001 stream-adapter \
    && useradd --system --uid 10001 --gid stream-adapter --home-dir /app \
       --shell /usr/sbin/nologin stream-adapter
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream_adapter ./stream_adapter
COPY topologies ./topologies
COPY deploy/healthcheck.py /usr/local/lib/stream-adapter/healthcheck.py
RUN pip install --no-cache-dir ".[otel]" \
    && mkdir -p /data /review \
    && chown stream-adapter:stream-adapter /data /review
USER 10001:10001
# The worker answers /health on its metrics port; the review service on its own port.
HEALTHCHECK --interval=15s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python", "/usr/local/lib/stream-adapter/healthcheck.py"]
ENTRYPOINT ["stream-adapter"]
CMD ["worker"]

# The worker image used by docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream_adapter ./stream_adapter
COPY topologies ./topologies
RUN pip install --no-cache-dir .
ENTRYPOINT ["stream-adapter"]
CMD ["worker"]

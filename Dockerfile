# The image of docker-compose.yml's worker, topic creation and review service.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream_adapter ./stream_adapter
COPY topologies ./topologies
RUN pip install --no-cache-dir ".[otel]"
ENTRYPOINT ["stream-adapter"]
CMD ["worker"]

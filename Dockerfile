# trainledger: builds the compiled pricing core, runs as a non-root user.
# Set TRAINLEDGER_REDIS_URL to use an existing Redis/Valkey; without it the embedded
# Valkey keeps its append-only file in /data (mount a volume there).
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY costcore ./costcore
COPY service ./service
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 trainledger && mkdir /data && chown trainledger /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER trainledger
WORKDIR /home/trainledger
ENV TRAINLEDGER_DATA_DIR=/data
EXPOSE 8000
HEALTHCHECK CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz')" || exit 1
CMD ["trainledger", "serve", "--host", "0.0.0.0", "--port", "8000"]

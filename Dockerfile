# trainledger: builds the compiled pricing core, runs as a non-root user.
#
#   docker build -t trainledger .
#   docker run --rm trainledger demo          # the walk-through, with its own embedded Valkey
#   docker run -p 8000:8000 -v trainledger-data:/data trainledger
#
# Set TRAINLEDGER_REDIS_URL to use an existing Redis/Valkey (compose.yaml does); without it the
# embedded Valkey keeps its append-only file in /data (mount a volume there).
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY costcore ./costcore
COPY service ./service
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TRAINLEDGER_DATA_DIR=/data
RUN groupadd --gid 10001 trainledger \
    && useradd --uid 10001 --gid 10001 --create-home --no-log-init trainledger \
    && install -d -o 10001 -g 10001 -m 0700 /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/trainledger
EXPOSE 8000
# Liveness: /healthz fails once Redis has been unreachable for
# TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS; readiness (/readyz) is for load balancers.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
# Any trainledger command: `docker run … trainledger demo`, `… trainledger tokens list`.
ENTRYPOINT ["trainledger"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]

# trainledger: builds the compiled pricing core, runs as a non-root user.
#
#   docker build -t trainledger:0.1.0 -t trainledger:latest .   # the version is pyproject's
#   docker run --rm trainledger:0.1.0 demo    # the walk-through, with its own embedded Valkey
#   docker run -p 8000:8000 -v trainledger-data:/data trainledger:0.1.0
#
# Every dependency comes from a lock with hashes (requirements/, refreshed by
# `python3 dev.py lock`), installed with --require-hashes: the same build gives the same image.
#
# Set TRAINLEDGER_REDIS_URL to use an existing Redis/Valkey (compose.yaml does); without it the
# embedded Valkey keeps its append-only file in /data (mount a volume there).
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements/build.txt /tmp/build.txt
RUN pip install --no-cache-dir --require-hashes -r /tmp/build.txt
COPY pyproject.toml setup.py README.md LICENSE ./
COPY costcore ./costcore
COPY service ./service
# Built with the locked build tools, not a fresh isolated (unlocked) environment.
RUN pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="trainledger" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TRAINLEDGER_DATA_DIR=/data
RUN groupadd --gid 10001 trainledger \
    && useradd --uid 10001 --gid 10001 --create-home --no-log-init trainledger \
    && install -d -o 10001 -g 10001 -m 0700 /data
COPY requirements/image.txt /tmp/image.txt
RUN pip install --no-cache-dir --require-hashes -r /tmp/image.txt && rm /tmp/image.txt
COPY --from=build /wheels /wheels
# The project alone: its dependencies are the locked ones above.
RUN pip install --no-cache-dir --no-deps /wheels/*.whl && rm -rf /wheels
# Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/trainledger
EXPOSE 8000
# Liveness: /healthz fails once Redis has been unreachable for
# TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS; readiness (/readyz) is for load balancers.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
# Any trainledger command: `docker run … trainledger demo`, `… trainledger token list`.
ENTRYPOINT ["trainledger"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]

# overspill as a container: mount your config.yaml at /etc/overspill/config.yaml.
#   docker build -t overspill .
#   docker run -p 4000:4000 -v $PWD/config.yaml:/etc/overspill/config.yaml:ro \
#       -e OPENAI_API_KEY -e OVERSPILL_MASTER_KEY overspill
# It listens on 0.0.0.0, so it refuses to start without a master key or client keys
# (general_settings.allow_unauthenticated: true serves open on purpose).
# SIGTERM (docker stop) lets open requests finish for general_settings.graceful_shutdown_seconds
# (30 s); docker waits only 10 s by default, so stop with `docker stop -t 40`. SIGHUP
# (docker kill -s HUP) reloads the mounted config.yaml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    OVERSPILL_CONFIG=/etc/overspill/config.yaml

WORKDIR /app
COPY pyproject.toml README.md ./
COPY cli ./cli
COPY kernel ./kernel
COPY proxy ./proxy
COPY middleware ./middleware
COPY providers ./providers
COPY evaluation ./evaluation
RUN pip install '.[otel]' && useradd --system --create-home --uid 10001 overspill \
    && mkdir -p /var/lib/overspill && chown overspill /var/lib/overspill
COPY config.yaml /etc/overspill/config.yaml

USER overspill
WORKDIR /var/lib/overspill
EXPOSE 4000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:4000/health/liveness', timeout=2); sys.exit(0)"
# Listen on all interfaces inside the container; the config's host is for bare-metal runs.
CMD ["overspill", "serve", "--host", "0.0.0.0", "--port", "4000"]

# syntax=docker/dockerfile:1
# Build stage: build the kgc wheel. By default the hot modules are compiled with mypyc
# (setup.py: the codec, record batch and group core; about 17% less CPU per durable commit);
# `docker build --build-arg KGC_MYPYC=0 .` builds the pure-Python wheel, and KGC_MYPYC=all
# compiles every message module too. The compiler is needed here only: the runtime stage gets
# the wheel, not gcc.
FROM python:3.11-slim AS build
ARG KGC_MYPYC=1
RUN if [ "$KGC_MYPYC" != "0" ]; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
        && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY protocol ./protocol
COPY storage ./storage
COPY coordinator ./coordinator
RUN pip install --no-cache-dir build && python -m build --wheel --outdir /wheels

# Runtime stage: the wheel in a slim image, run as a non-root user.
FROM python:3.11-slim
RUN useradd --system --uid 1000 --home-dir /var/lib/kgc kgc \
    && mkdir -p /var/lib/kgc/data && chown -R kgc /var/lib/kgc
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER kgc
WORKDIR /var/lib/kgc
ENV KGC_HOST=0.0.0.0 \
    KGC_DATA_DIR=/var/lib/kgc/data \
    PYTHONUNBUFFERED=1
VOLUME ["/var/lib/kgc/data"]
# 9092: PLAINTEXT (the default). 9093: the secured listener of the README's "Securing kgc"
# example (SASL_SSL), e.g. with a server.properties mounted at /etc/kgc:
#   docker run -p 9093:9093 -v $PWD/secure:/etc/kgc kgc serve --config /etc/kgc/server.properties
# 9404: Prometheus metrics.
EXPOSE 9092 9093 9404
# The health check follows the ports kgc was configured with, however they were given (flags
# after "serve", KGC_* variables, a --config properties file): it reads the server's own
# command line and settings with kgc's loader. With the metrics endpoint on it asks /healthz,
# which answers from the server's event loop (a stuck loop fails it); with metrics.port=0 it
# connects to the first listener. Python, since slim images have no curl. (A heredoc: BuildKit,
# the default builder since Docker 23.)
COPY --chmod=755 <<'EOF' /usr/local/bin/kgc-healthcheck
#!/usr/local/bin/python
"""kgc's container health check: exit 0 if the server answers on its configured port."""
import argparse
import socket
import sys
import urllib.request

from coordinator import config


def server_args(pid: str) -> list[str]:
    # PID 1 is the entrypoint's "kgc serve ..." (or an init's "... -- kgc serve ...").
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        args = [a.decode() for a in f.read().split(b"\0") if a]
    return args[args.index("serve") + 1 :] if "serve" in args else []


def loopback(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def healthy(pid: str) -> bool:
    parser = argparse.ArgumentParser(add_help=False)
    config.add_arguments(parser)
    flags, _unknown = parser.parse_known_args(server_args(pid))
    settings = config.load(flags)  # flags, then KGC_* variables, then --config's file
    if settings.metrics_port:
        url = f"http://{loopback(settings.host)}:{settings.metrics_port}/healthz"
        with urllib.request.urlopen(url, timeout=4) as resp:
            return bool(resp.status == 200)
    first = (settings.listeners or f"PLAINTEXT://{settings.host}:{settings.port}").split(",")[0]
    host, _, port = first.split("://", 1)[1].rpartition(":")
    socket.create_connection((loopback(host.strip("[]")), int(port)), timeout=4).close()
    return True


try:
    ok = healthy(sys.argv[1] if len(sys.argv) > 1 else "1")
except (OSError, ValueError, SystemExit) as e:  # SystemExit: settings kgc would refuse
    print(f"kgc is not healthy: {e!r}", file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)  # Docker's meanings: 0 healthy, 1 unhealthy
EOF
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["kgc-healthcheck"]
# kgc handles SIGTERM as a clean shutdown (in-flight responses sent, logs closed).
STOPSIGNAL SIGTERM
ENTRYPOINT ["kgc"]
CMD ["serve"]

# syntax=docker/dockerfile:1
# Build stage: build the kgc wheel.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
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
# The CLI asks the server for ApiVersions; non-zero if it does not answer.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["kgc", "health", "--bootstrap-server", "127.0.0.1:9092"]
# kgc handles SIGTERM as a clean shutdown (in-flight responses sent, logs closed).
STOPSIGNAL SIGTERM
ENTRYPOINT ["kgc"]
CMD ["serve"]
